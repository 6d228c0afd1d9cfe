"""Bounded reads from aiohttp streams, shared by the proxy and the resolver client."""

from __future__ import annotations

from aiohttp import StreamReader


async def read_capped(stream: StreamReader, cap: int) -> tuple[bytes, bool]:
    """Up to `cap` bytes; the flag is True when that was the whole body.

    Loops because one `read(n)` may return fewer than `n` bytes long before the end.
    """
    chunks: list[bytes] = []
    size = 0
    while size <= cap:
        chunk = await stream.read(cap + 1 - size)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False
