"""curl as the real client of differential tests: what it sent and what it was answered."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(frozen=True)
class CurlResult:
    status: int
    uploaded: int  # request body bytes curl sent
    heads: list[str]  # every response head curl saw, interim ones first
    body: bytes


async def curl(url: str, *args: str, timeout_s: float = 20) -> CurlResult:
    """`curl -i URL ARGS`; the heads are split from the body, interim answers included."""
    process = await asyncio.create_subprocess_exec(
        *("curl", "-sS", "-i", "--max-time", str(timeout_s), "-w", "\n%{http_code} %{size_upload}"),
        *args,
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    out, _, tail = out.rpartition(b"\n")
    status, uploaded = tail.decode().split()
    heads: list[str] = []
    rest = out
    while rest.startswith(b"HTTP/"):
        head, _, rest = rest.partition(b"\r\n\r\n")
        heads.append(head.decode("latin-1"))
    return CurlResult(int(status), int(float(uploaded)), heads, rest)
