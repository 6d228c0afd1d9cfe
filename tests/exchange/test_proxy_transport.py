"""Transport failures: no usable HTTP response came back, so the gateway synthesises one.

Connection refused, read timeouts, connections dropped before or after the response head, and
upstreams speaking broken HTTP. Broken upstreams are raw asyncio servers on 127.0.0.1 that
write exactly the bytes each case needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDictProxy

from tests.support.gateway import (
    RawHandler,
    RunningGateway,
    StartGateway,
    StartRaw,
    StartUpstream,
    route_config,
)
from tests.support.ports import free_port

REQUEST_ID = "rid-transport"
ENVELOPE_KEYS = {"ok", "data", "error", "failure", "recovery", "warnings", "meta"}
ADVISORY = ("X-Error-Code", "X-Error-Retryable", "X-Error-Recoverable", "X-Recovery-Available")


def reply_with(data: bytes, *, reset: bool = False) -> RawHandler:
    """A raw upstream that reads the request head, writes `data`, then closes (or resets)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if data:
            writer.write(data)
            await writer.drain()
        if reset:
            sock: socket.socket = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await asyncio.sleep(0.01)

    return handler


@dataclass(frozen=True)
class Reply:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def fetch(gateway: RunningGateway, method: str, path: str = "/thing") -> Reply:
    headers = {"X-Request-Id": REQUEST_ID}
    data = b'{"order": 1}' if method in ("POST", "PATCH", "PUT") else None
    url = gateway.url + path
    async with gateway.session.request(method, url, headers=headers, data=data) as response:
        return Reply(response.status, response.headers, await response.read())


def closed_port() -> int:
    """A loopback port with nothing listening on it."""
    return free_port()


def check_synthesised(
    reply: Reply,
    mode: str,
    *,
    status: int,
    code: str,
    retryable: bool,
    transport: str,
) -> dict[str, Any] | None:
    """Shared checks for a gateway-made failure; returns the envelope when there is one."""
    assert reply.status == status
    assert reply.headers["X-Request-Id"] == REQUEST_ID
    assert int(reply.headers["Content-Length"]) == len(reply.body)
    if mode == "original":
        for name in ADVISORY:
            assert name not in reply.headers
    else:
        assert reply.headers["X-Error-Code"] == code
        assert reply.headers["X-Error-Retryable"] == ("true" if retryable else "false")
    if mode in ("original", "headers"):
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.body.decode()
        assert 0 < len(text) < 200
        assert text.endswith("\n")
        assert "{" not in text
        assert "<" not in text
        return None
    assert reply.headers["Content-Type"] == "application/json"
    body: dict[str, Any] = reply.json()
    assert set(body) == ENVELOPE_KEYS
    assert body["ok"] is False
    error = body["error"]
    assert error["code"] == code
    assert error["retryable"] is retryable
    assert error["request_id"] == REQUEST_ID
    assert body["failure"]["code"] == code
    assert body["recovery"] == {"available": False, "options": []}
    assert body["meta"]["upstream_status"] is None
    assert body["meta"]["original"] is None
    assert body["meta"]["transport"] == transport
    if retryable:
        assert error["retry_after_ms"] is not None
        assert reply.headers["Retry-After"] == str(-(-error["retry_after_ms"] // 1000))
    else:
        assert error["retry_after_ms"] is None
        assert "Retry-After" not in reply.headers
    return body


MODES = ("original", "headers", "additive", "envelope")
METHODS = ("GET", "POST")


# --- connection refused ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", METHODS)
async def test_connection_refused_is_502_unreachable_and_retryable(
    method: str, mode: str, start_gateway: StartGateway
) -> None:
    upstream = f"http://127.0.0.1:{closed_port()}"
    gateway = await start_gateway(route_config(upstream, mode=mode))
    reply = await fetch(gateway, method)
    body = check_synthesised(
        reply,
        mode,
        status=502,
        code="UPSTREAM_UNREACHABLE",
        retryable=True,
        transport="connect_refused",
    )
    if body is not None:
        assert body["failure"]["category"] == "UNAVAILABLE"
        assert body["meta"]["exit_code"] == 6
        assert body["meta"]["rule"] == "transport-unreachable"


# --- read timeout ------------------------------------------------------------------------


@dataclass
class Sleeper:
    """An upstream that accepts the request and then never answers (until released)."""

    hits: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        await request.read()
        await asyncio.wait_for(self.release.wait(), 10)
        return web.Response(text="too late")


@pytest.fixture
async def sleeper(start_upstream: StartUpstream) -> AsyncIterator[tuple[Sleeper, str]]:
    slow = Sleeper()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", slow.handle)
    url = await start_upstream(app)
    yield slow, url
    slow.release.set()


READ_TIMEOUTS = {
    "get-envelope": ("GET", "envelope", True),
    "delete-additive": ("DELETE", "additive", True),
    "post-envelope": ("POST", "envelope", False),
    "patch-additive": ("PATCH", "additive", False),
    "get-headers": ("GET", "headers", True),
    "post-original": ("POST", "original", False),
}


@pytest.mark.parametrize(
    ("method", "mode", "retryable"), list(READ_TIMEOUTS.values()), ids=list(READ_TIMEOUTS)
)
async def test_read_timeout_is_504_retryable_only_when_idempotent(
    method: str,
    mode: str,
    retryable: bool,
    sleeper: tuple[Sleeper, str],
    start_gateway: StartGateway,
) -> None:
    slow, url = sleeper
    config = {**route_config(url, mode=mode), "limits": {"read_timeout_s": 0.3}}
    gateway = await start_gateway(config)
    started = time.monotonic()
    reply = await fetch(gateway, method)
    assert time.monotonic() - started < 5
    body = check_synthesised(
        reply,
        mode,
        status=504,
        code="UPSTREAM_TIMEOUT",
        retryable=retryable,
        transport="read_timeout",
    )
    assert slow.hits == 1
    if body is not None:
        assert body["failure"]["category"] == "TIMEOUT"
        if not retryable:
            assert body["error"]["suggestion"]


# --- the upstream drops the connection before the response head ----------------------------

DROPS = {
    "get-fin": ("GET", False, True),
    "get-rst": ("GET", True, True),
    "head-fin": ("HEAD", False, True),
    "post-fin": ("POST", False, False),
    "post-rst": ("POST", True, False),
}


@pytest.mark.parametrize(("method", "reset", "retryable"), list(DROPS.values()), ids=list(DROPS))
@pytest.mark.parametrize("mode", ["headers", "envelope"])
async def test_connection_lost_before_headers_is_502_and_not_resent(
    method: str,
    reset: bool,
    retryable: bool,
    mode: str,
    start_raw: StartRaw,
    start_gateway: StartGateway,
) -> None:
    upstream = await start_raw(reply_with(b"", reset=reset))
    gateway = await start_gateway(route_config(upstream.url, mode=mode))
    reply = await fetch(gateway, method)
    if method == "HEAD":
        assert reply.status == 502
        assert reply.headers["X-Error-Code"] == "UPSTREAM_CONNECTION_LOST"
    else:
        check_synthesised(
            reply,
            mode,
            status=502,
            code="UPSTREAM_CONNECTION_LOST",
            retryable=retryable,
            transport="reset",
        )
    # The gateway never resends: the dropped request may already have had its effect.
    assert upstream.connections == 1


# --- invalid HTTP from the upstream ----------------------------------------------------------

GARBAGE = {
    "not-http": b"garbage, not HTTP at all\r\n\r\n",
    "bad-status-code": b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
    "bad-version": b"HTTP/9.Q 200 OK\r\nContent-Length: 0\r\n\r\n",
    "bad-header-line": b"HTTP/1.1 200 OK\r\nNo colon here\r\nContent-Length: 0\r\n\r\n",
    "conflicting-lengths": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello"
    ),
    "length-and-chunked": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n"
    ),
    "bad-chunk-size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n",
    "huge-header": b"HTTP/1.1 200 OK\r\nX-Huge: "  # over limits.max_response_header_bytes
    + b"h" * 100_000
    + b"\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("data", list(GARBAGE.values()), ids=list(GARBAGE))
async def test_invalid_http_is_502_bad_response(
    data: bytes, start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    upstream = await start_raw(reply_with(data))
    gateway = await start_gateway(route_config(upstream.url, mode="envelope"))
    reply = await fetch(gateway, "GET")
    body = check_synthesised(
        reply,
        "envelope",
        status=502,
        code="UPSTREAM_BAD_RESPONSE",
        retryable=False,
        transport="invalid_response",
    )
    assert body is not None
    assert body["failure"]["category"] == "UPSTREAM_ERROR"
    assert upstream.connections == 1


@pytest.mark.parametrize("mode", ["original", "headers"])
async def test_invalid_http_in_header_modes_is_short_plain_text(
    mode: str, start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    upstream = await start_raw(reply_with(GARBAGE["not-http"]))
    gateway = await start_gateway(route_config(upstream.url, mode=mode))
    reply = await fetch(gateway, "GET")
    check_synthesised(
        reply,
        mode,
        status=502,
        code="UPSTREAM_BAD_RESPONSE",
        retryable=False,
        transport="invalid_response",
    )
    assert b"garbage" not in reply.body


# --- failures after the response head ------------------------------------------------------

TRUNCATED = {
    "length-200": b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789",
    "chunked-200": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n"),
    "length-500-over-cap": (
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n" + b'{"message":"' + b"x" * 2000
    ),
}


@pytest.mark.parametrize("data", list(TRUNCATED.values()), ids=list(TRUNCATED))
@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
async def test_body_cut_after_headers_is_never_a_clean_short_body(
    data: bytes, reset: bool, start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    upstream = await start_raw(reply_with(data, reset=reset))
    config = {**route_config(upstream.url), "limits": {"error_body_bytes": 1024}}
    gateway = await start_gateway(config)
    async with gateway.session.get(gateway.url + "/big") as response:
        assert response.status in (200, 500)
        # A hang (the client waiting for bytes that never come) fails too.
        async with asyncio.timeout(5):
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()


async def test_error_body_cut_before_it_was_read_becomes_a_502(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """The gateway was still reading the (small) error body: nothing was sent yet."""
    data = (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
        b'Content-Length: 500\r\n\r\n{"message": "cut'
    )
    upstream = await start_raw(reply_with(data))
    gateway = await start_gateway(route_config(upstream.url, mode="envelope"))
    reply = await fetch(gateway, "GET")
    check_synthesised(
        reply,
        "envelope",
        status=502,
        code="UPSTREAM_CONNECTION_LOST",
        retryable=True,
        transport="reset",
    )


async def test_body_delimited_by_close_is_complete(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """With no length and no chunking, the upstream's close is the legitimate end of the body."""
    data = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\nuntil eof"
    upstream = await start_raw(reply_with(data))
    gateway = await start_gateway(route_config(upstream.url))
    reply = await fetch(gateway, "GET")
    assert reply.status == 200
    assert reply.body == b"until eof"


async def test_gateway_keeps_serving_after_transport_failures(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    calls = 0

    async def flaky(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        calls += 1
        await reader.readuntil(b"\r\n\r\n")
        if calls % 2:
            writer.write(b"nonsense\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()

    upstream = await start_raw(flaky)
    gateway = await start_gateway(route_config(upstream.url))
    statuses = [(await fetch(gateway, "GET")).status for _ in range(6)]
    assert statuses == [502, 200] * 3
    assert upstream.connections == 6


async def test_slow_upstream_does_not_delay_other_requests(
    sleeper: tuple[Sleeper, str], start_gateway: StartGateway
) -> None:
    """One request stuck on a slow upstream leaves the gateway free for the others."""
    slow, url = sleeper
    config = {**route_config(url, mode="envelope"), "limits": {"read_timeout_s": 2}}
    gateway = await start_gateway(config)
    stuck = asyncio.ensure_future(fetch(gateway, "GET", "/stuck"))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(0.2):
            await asyncio.shield(stuck)
    slow.release.set()
    done = await fetch(gateway, "GET", "/next")
    assert done.status == 200
    assert done.body == b"too late"
    assert (await stuck).status == 200


def stall_after(data: bytes) -> RawHandler:
    """A raw upstream that sends `data` (a head and part of a body), then goes silent."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(5):
            await reader.read()  # until the gateway gives up and closes

    return handler


async def test_error_body_stalling_before_it_was_read_becomes_a_504(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    head = b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    upstream = await start_raw(stall_after(head + b'{"me'))
    config = {**route_config(upstream.url, mode="envelope"), "limits": {"read_timeout_s": 0.3}}
    gateway = await start_gateway(config)
    reply = await fetch(gateway, "GET")
    check_synthesised(
        reply,
        "envelope",
        status=504,
        code="UPSTREAM_TIMEOUT",
        retryable=True,
        transport="read_timeout",
    )


async def test_success_body_stalling_after_headers_is_cut_not_completed(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n"
    upstream = await start_raw(stall_after(head + b"0123456789"))
    config = {**route_config(upstream.url), "limits": {"read_timeout_s": 0.3}}
    gateway = await start_gateway(config)
    async with gateway.session.get(gateway.url + "/slow") as response:
        assert response.status == 200
        async with asyncio.timeout(5):
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()
