"""A drain ends within `shutdown.drain_delay_s + shutdown.grace_s`, whatever is still open.

A real gateway process, SIGTERM, and a stopwatch: whatever a client holds open when the
signal comes (an SSE stream, a request the upstream never answers, a WebSocket tunnel, an MCP
bridge session with a call in flight) is served on until the grace runs out, and then the
process exits 0 at once, so a platform that waits a little longer than drain + grace
(`terminationGracePeriodSeconds`) never kills it mid-stream
(docs/operations.md#reload-and-shutdown).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from tests.support.gateway import StartUpstream, start_process, wait_ready
from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS
from tests.support.ports import free_port

DRAIN_S, GRACE_S = 0.3, 1.5
# What the process may take past drain + grace to close what is left and exit: a busy
# machine's scheduling, not another grace (before the fix it took a second grace in full).
EXIT_S = 0.9
EVENT_EVERY_S = 0.05
# bad_server.py, which then ignores the end of its input for a minute: a child the bridge must
# kill, since the grace is spent by the time the gateway stops it.
STUBBORN_SERVER = [
    sys.executable,
    "-c",
    f"import sys, time; sys.path.insert(0, {str(MCP_SERVERS)!r}); import bad_server; "
    "bad_server.main([]); time.sleep(60)",
]


def upstream_app(asked: asyncio.Event) -> web.Application:
    """An SSE stream that never ends, and a request that is never answered."""

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        n = 0
        while True:
            await response.write(f"id: {n}\ndata: tick\n\n".encode())
            n += 1
            await asyncio.sleep(EVENT_EVERY_S)

    async def never(request: web.Request) -> web.Response:
        asked.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_get("/events", events)
    app.router.add_get("/never", never)
    app.router.add_get("/ws", _echo)
    return app


async def _echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for message in ws:
        await ws.send_str("echo:" + message.data)
    return ws


@dataclass
class Drain:
    """What the held connections share: the client, the gateway, when SIGTERM went."""

    session: aiohttp.ClientSession
    base: str
    asked: asyncio.Event  # the upstream got /never
    signalled: float | None = None


Held = Callable[[Drain], AbstractAsyncContextManager[None]]


@asynccontextmanager
async def sse_stream(drain: Drain) -> AsyncIterator[None]:
    async with drain.session.get(drain.base + "/api/events") as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        assert (await response.content.readline()).startswith(b"id: ")
        reading = asyncio.ensure_future(_events_until_closed(response, drain))
        yield
        # The stream flowed on through the drain and ended only with the grace.
        kept_for, after_signal = await reading
        assert kept_for >= DRAIN_S + GRACE_S - EVENT_EVERY_S * 2
        assert after_signal >= (DRAIN_S + GRACE_S) / EVENT_EVERY_S / 2


async def _events_until_closed(response: aiohttp.ClientResponse, drain: Drain) -> tuple[float, int]:
    """How long after SIGTERM the stream lasted, and how many events came in that time."""
    events = 0
    last = time.monotonic()
    try:
        while line := await response.content.readline():
            if line.startswith(b"id: ") and drain.signalled is not None:
                events += 1
                last = time.monotonic()
    except aiohttp.ClientError:
        pass
    assert drain.signalled is not None
    return last - drain.signalled, events


@asynccontextmanager
async def unanswered_request(drain: Drain) -> AsyncIterator[None]:
    waiting = asyncio.ensure_future(drain.session.get(drain.base + "/api/never"))
    await asyncio.wait_for(drain.asked.wait(), 10)
    yield
    with pytest.raises(aiohttp.ClientError):
        await waiting  # the gateway closed the connection when the grace ran out


@asynccontextmanager
async def websocket_tunnel(drain: Drain) -> AsyncIterator[None]:
    async with drain.session.ws_connect(drain.base + "/api/ws") as ws:
        await ws.send_str("before")
        assert (await ws.receive_str(timeout=5)) == "echo:before"
        yield
        closed = await ws.receive(timeout=30)
        assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


@asynccontextmanager
async def bridge_session(drain: Drain) -> AsyncIterator[None]:
    """A bridge session with its GET stream open and a call its server never answers."""
    session, url = drain.session, drain.base + "/tools"
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with session.post(url, data=json.dumps(INIT), headers=headers) as init:
        assert init.status == 200, await init.text()
        headers["Mcp-Session-Id"] = init.headers["Mcp-Session-Id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with session.post(url, data=json.dumps(initialized), headers=headers) as answer:
        assert answer.status == 202
    stream = await session.get(url, headers={**headers, "Accept": "text/event-stream"})
    assert stream.status == 200
    silent = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_raw": ""}}
    call = asyncio.ensure_future(session.post(url, data=json.dumps(silent), headers=headers))
    await asyncio.sleep(0.2)  # the call reaches the child; it is never answered
    assert not call.done()
    yield
    stream.close()
    try:
        answer = await call
        await answer.read()  # the session ended with the gateway: an error, or a cut
    except aiohttp.ClientError:
        pass


HELD: tuple[Held, ...] = (sse_stream, unanswered_request, websocket_tunnel, bridge_session)


async def test_the_drain_ends_within_the_delay_and_the_grace(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """All of them open at once, in one process: each is served on until the grace ends,
    and the process exits then (each alone took drain + 2 x grace before)."""
    asked = asyncio.Event()
    upstream = await start_upstream(upstream_app(asked))
    port, admin = free_port(), free_port()
    config: dict[str, Any] = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [
            {"name": "api", "prefix": "/api", "upstream": upstream, "strip_prefix": True},
            {"name": "tools", "prefix": "/tools", "type": "mcp", "command": STUBBORN_SERVER},
        ],
        "shutdown": {"drain_delay_s": DRAIN_S, "grace_s": GRACE_S},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    process = await start_process("serve", "--config", str(path))
    try:
        async with aiohttp.ClientSession() as session, AsyncExitStack() as stack:
            drain = Drain(session, f"http://127.0.0.1:{port}", asked)
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz")
            for held in HELD:
                await stack.enter_async_context(held(drain))
            drain.signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), DRAIN_S + GRACE_S * 3 + 10)
            took = time.monotonic() - drain.signalled
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.stderr is not None
    stderr = (await process.stderr.read()).decode()
    assert code == 0, stderr
    assert DRAIN_S + GRACE_S - 0.1 <= took <= DRAIN_S + GRACE_S + EXIT_S, (took, stderr)
    assert "shutdown.grace_s is over: closing 4 connections still open" in stderr
