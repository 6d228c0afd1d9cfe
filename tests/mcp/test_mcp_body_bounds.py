"""MCP request bodies are bounded before they are parsed (docs/security.md#mcp-bodies).

Through a real gateway process: a body holding millions of JSON values (a batch of empty
objects; gzip'd it is 11 KiB) sent to an MCP route and to a bridge route before any session
exists, with and without `Content-Encoding`, is answered 413 without building them: the
process grows by less than 32 MiB and a small request on another route meanwhile waits less
than a stated bound (on main the gzip'd batch took 300 MiB and held the loop for seconds). A
legitimate large `tools/call` still reaches the upstream byte for byte. The bound itself is
held at its edges.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.config.relay_limits import RelayLimits
from gateway.failure import Refusal
from gateway.mcp.request_body import parse_request
from gateway.text.json_values import values_at_most
from tests.support.gateway import StartUpstream, supervised, write_config
from tests.support.paths import MCP_SERVERS
from tests.support.ports import free_port

SDK_STDIO = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
EMPTY_OBJECTS = 4_000_000
MAX_GROWTH_MIB = 32
MAX_STALL_S = 0.25
"""A small request's longest wait while a crafted body is handled (about 2 s on main)."""
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def batch_of_empty_objects(count: int) -> bytes:
    return b"[" + b"{}," * (count - 1) + b"{}]"


def memory_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field}")


def reset_peak(pid: int) -> None:
    """The process's peak RSS (VmHWM) starts again from its RSS now (Linux's clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class Recording:
    """An MCP upstream that keeps the bytes of each POST and answers a JSON-RPC result."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def app(self) -> web.Application:
        async def post(request: web.Request) -> web.Response:
            body = await request.read()
            self.bodies.append(body)
            message = json.loads(body)
            reply = {"jsonrpc": "2.0", "id": message.get("id"), "result": {"content": []}}
            return web.json_response(reply)

        async def ok(request: web.Request) -> web.Response:
            return web.Response(text="ok")

        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/mcp", post)
        app.router.add_get("/ok", ok)
        return app


@pytest.fixture
async def gateway(
    start_upstream: StartUpstream, tmp_path: Path
) -> AsyncIterator[tuple[str, int, Recording]]:
    recording = Recording()
    upstream = await start_upstream(recording.app())
    listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    routes = [
        {"name": "tools", "prefix": "/mcp", "type": "mcp", "upstream": upstream},
        {"name": "bridge", "prefix": "/bridge", "type": "mcp", "command": SDK_STDIO},
        {"name": "plain", "prefix": "/", "upstream": upstream},
    ]
    config = write_config(tmp_path, {"listen": listen, "admin": admin, "routes": routes})
    async with supervised(config, admin, tmp_path, workers=None) as process:
        yield f"http://{listen}", process.pid, recording


async def probe_stalls(session: aiohttp.ClientSession, url: str, done: asyncio.Event) -> float:
    """The longest a small request waited while `done` is not set."""
    waits = []
    while not done.is_set():
        begun = time.monotonic()
        async with session.get(url) as response:
            assert response.status == 200
            await response.read()
        waits.append(time.monotonic() - begun)
        await asyncio.sleep(0.01)
    return max(waits, default=0.0)


@pytest.mark.parametrize("route", ["/mcp", "/bridge/mcp"], ids=["route", "bridge"])
@pytest.mark.parametrize("coding", ["gzip", "none"])
async def test_a_body_of_millions_of_values_is_refused_unparsed(
    gateway: tuple[str, int, Recording], route: str, coding: str
) -> None:
    base, pid, recording = gateway
    body = batch_of_empty_objects(EMPTY_OBJECTS)
    headers = dict(HEADERS)
    if coding == "gzip":
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
        assert len(body) < 16 << 10  # the 11 KiB of the finding
    async with aiohttp.ClientSession() as session:
        for _ in range(3):  # warm: the probe's route and the refusal's path
            async with session.get(base + "/ok") as warm:
                await warm.read()
        reset_peak(pid)
        before = memory_mib(pid, "VmRSS")
        done = asyncio.Event()
        probe = asyncio.create_task(probe_stalls(session, base + "/ok", done))
        try:
            await asyncio.sleep(0.05)
            sent = io.BytesIO(body)
            async with session.post(base + route, data=sent, headers=headers) as response:
                answered = response.status
                await response.read()
        finally:
            done.set()
            stall = await probe
        grown = memory_mib(pid, "VmHWM") - before  # the peak while it was handled
    assert answered == 413
    assert grown < MAX_GROWTH_MIB, f"grew {grown:.0f} MiB"
    assert stall < MAX_STALL_S, f"a small request waited {stall * 1000:.0f} ms"
    assert recording.bodies == []  # nothing reached the upstream


async def test_a_large_legitimate_call_passes_byte_for_byte(
    gateway: tuple[str, int, Recording],
) -> None:
    """1 MiB of arguments, five thousand values: under every bound, forwarded as sent."""
    base, _, recording = gateway
    rows = [{"id": n, "name": "x" * 180, "tags": ["a", "b"]} for n in range(1200)]
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "load", "arguments": {"rows": rows}},
    }
    body = json.dumps(call, indent=1).encode()
    assert len(body) > 256 << 10  # read off the loop
    async with (
        aiohttp.ClientSession() as session,
        session.post(base + "/mcp", data=io.BytesIO(body), headers=HEADERS) as response,
    ):
        assert response.status == 200
        assert (await response.json())["id"] == 7
    assert recording.bodies == [body]


LIMITS = RelayLimits(max_message_values=100, max_batch_messages=3)


@pytest.mark.parametrize(
    ("text", "limit", "fits"),
    [
        (b"[" + b"1," * 98 + b"1]", 100, True),  # 99 numbers and the array: 100 values
        (b"[" + b"1," * 99 + b"1]", 100, False),  # one more
        (b'{"a": "' + b",[{" * 500 + b'"}', 3, True),  # brackets inside a string count not
        (b'{"a": "\\"' + b",[{" * 500 + b'"}', 3, True),  # nor behind an escaped quote
        (b"[[[[[[]]]]]]", 7, True),  # an upper bound: an empty container counts one more
        (b"[[[[[[]]]]]]", 6, False),
        (b'"just a string"', 1, True),
    ],
    ids=["at-limit", "one-over", "in-string", "escaped-quote", "nested", "nested-over", "scalar"],
)
def test_the_bound_at_its_edges(text: bytes, limit: int, fits: bool) -> None:
    assert values_at_most(text, limit) is fits


def test_a_batch_too_long_is_refused_and_one_within_is_parsed() -> None:
    call: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    three = json.dumps([call] * 3).encode()
    four = json.dumps([call] * 4).encode()
    assert parse_request(three, LIMITS) == [call] * 3
    assert parse_request(four, LIMITS) is Refusal.BODY_TOO_LARGE
    assert parse_request(b"[" + b"{}," * 200 + b"{}]", LIMITS) is Refusal.BODY_TOO_LARGE


def test_the_bound_costs_a_scan_not_a_parse() -> None:
    """A 12 MB batch of empty objects is judged in milliseconds, without building it."""
    body = batch_of_empty_objects(EMPTY_OBJECTS)
    timings = []
    for _ in range(3):
        begun = time.process_time()
        assert not values_at_most(body, 100_000)
        timings.append(time.process_time() - begun)
    assert statistics.median(timings) < 0.2
