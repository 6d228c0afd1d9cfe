"""`log.format: text` against JSON (docs/operations.md#logs), read off a real gateway's stderr.

The same requests, with the same request ids, go through one gateway process logging JSON
and one logging text; each text access line must carry the JSON line's fields (those that
are not null), parse back to the same values, and stay one line even when a field holds a
decoded CR/LF.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from tests.support.gateway import StartUpstream
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.waits import patience

# (request id, target): a success, an upstream failure, a refusal whose path holds a decoded
# CR/LF and a forged log line, and a path with a space, a quote and an equals sign.
REQUESTS = (
    ("req-ok-1", "/ok"),
    ("req-gone-2", "/gone"),
    ("req-crlf-3", "/ok%0d%0a2026-01-01T00:00:00.000Z%20INFO%20mendpoint.access:%20forged"),
    ("req-odd-4", "/a%20b%22c=d"),
)
DURATIONS = ("duration_ms", "upstream_ms")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
PAIR = re.compile(r' ([a-z_]+)=("(?:[^"\\]|\\.)*"|[^ "]+)')


def upstream_app() -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        if request.path == "/gone":
            return web.json_response({"message": "gone for good"}, status=410)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


async def access_log(upstream: str, log_format: str) -> str:
    """Run a gateway logging in `log_format`, send REQUESTS, stop it; its stderr."""
    port, admin = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--upstream",
        upstream,
        "--listen",
        f"127.0.0.1:{port}",
        "--admin",
        f"127.0.0.1:{admin}",
        cwd=REPO,
        env={**os.environ, "MENDPOINT_LOG_FORMAT": log_format},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + patience(20)
            while True:
                try:
                    async with session.get(f"http://127.0.0.1:{admin}/readyz") as ready:
                        if ready.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    assert time.monotonic() < deadline, "the gateway never became ready"
                    await asyncio.sleep(0.05)
            for request_id, target in REQUESTS:
                url = f"http://127.0.0.1:{port}{target}"
                headers = {"X-Request-Id": request_id}
                async with session.get(URL(url, encoded=True), headers=headers):
                    pass
    finally:
        process.send_signal(signal.SIGINT)  # no drain delay
        await asyncio.wait_for(process.wait(), 30)
    assert process.stderr is not None
    return (await process.stderr.read()).decode()


def parse_text_line(line: str) -> dict[str, Any]:
    """The `key=value` pairs after `mendpoint.access: request`, values decoded."""
    _, sep, tail = line.partition(" mendpoint.access: request")
    assert sep, line
    fields: dict[str, Any] = {}
    for key, raw in PAIR.findall(tail):
        fields[key] = json.loads(raw) if raw.startswith('"') else raw
    assert " ".join(f"{k}={v}" for k, v in PAIR.findall(tail)) == tail.strip(), tail
    return fields


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


async def test_text_access_lines_carry_the_json_fields(start_upstream: StartUpstream) -> None:
    upstream = await start_upstream(upstream_app())
    json_log, text_log = await asyncio.gather(
        access_log(upstream, "json"), access_log(upstream, "text")
    )
    json_lines = [
        json.loads(line) for line in json_log.splitlines() if '"logger":"mendpoint.access"' in line
    ]
    text_lines = [line for line in text_log.splitlines() if " mendpoint.access: " in line]
    assert [e["request_id"] for e in json_lines] == [r for r, _ in REQUESTS]
    # One record, one line: the forged line inside the CR/LF path never starts a line.
    assert len(text_lines) == len(REQUESTS)
    assert all(
        STAMP.match(line) and " INFO mendpoint.access: request " in line for line in text_lines
    )
    assert not any(
        "forged" in line and STAMP.match(line) and "req-crlf-3" not in line
        for line in text_log.splitlines()
    )
    for entry, line in zip(json_lines, text_lines, strict=True):
        parsed = parse_text_line(line)
        expected = {k: v for k, v in entry.items() if k not in ("ts", "level", "logger", "msg")}
        shown = {k: v for k, v in expected.items() if v is not None}
        assert set(parsed) == set(shown), line
        for key, value in shown.items():
            if key not in DURATIONS:
                assert parsed[key] == as_text(value), (key, line)
    crlf = parse_text_line(text_lines[2])
    assert crlf["path"].startswith("/ok\r\n2026-01-01") and crlf["status"] == "400"
    assert parse_text_line(text_lines[1])["failure_code"] == "GONE"
