"""WebSocket tunnels: after the upstream's 101, bytes both ways, untouched, until one side closes.

A client that asks a `type: http` route for `Upgrade: websocket` gets the upstream's answer to
that same handshake: `forward` sends it through `call_upstream` with the Upgrade and
`Connection: Upgrade` it otherwise strips as hop-by-hop. Any answer but 101 is an ordinary
response (a 403 is classified like any failure). On 101 the upstream connection leaves the
pool (`UpstreamResponse.detach`), the 101 goes to the client, and from then on both
connections only carry frames the gateway never parses: it relays bytes, with aiohttp's own
flow control on each side, until either side closes or nothing moved for
`limits.tunnel_idle_timeout_s` (docs/transparency.md). Only "websocket" is tunnelled; any
other Upgrade (h2c, …) is answered over HTTP/1.1 as before (`protocol.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
from aiohttp import StreamReader, hdrs, web

from gateway.exchange.context import RequestContext, echo_request_id
from gateway.exchange.headers import client_response_headers
from gateway.exchange.upstream.round_trip import UpstreamResponse
from gateway.fence.aiohttp_private import BaseProtocol, RelayResponse, ResponseHandler, StreamWriter
from gateway.telemetry.metrics import TUNNELS_CLOSED, TUNNELS_OPENED

log = logging.getLogger("mendpoint.proxy")

WEBSOCKET = "websocket"
# Bytes buffered from one side before its reading pauses until the other side takes them.
BUFFER_BYTES = 2**16


def websocket_upgrade(request: web.Request) -> bool:
    """Whether the client asks to switch this connection to WebSocket (RFC 6455 §4.1): a
    GET whose Upgrade names websocket and whose Connection names upgrade."""
    if request.method != hdrs.METH_GET:
        return False
    upgrade = request.headers.get(hdrs.UPGRADE)
    if not upgrade or WEBSOCKET not in (p.strip().lower() for p in upgrade.split(",")):
        return False
    connection = request.headers.get(hdrs.CONNECTION, "")
    return "upgrade" in (p.strip().lower() for p in connection.split(","))


class _Feed:
    """A parser in aiohttp's sense for an upgraded connection: it parses nothing, it hands
    every received byte to a stream (whose buffer limit pauses the connection's reading).
    On the client's side `_ClientSide` receives the bytes instead, and this only ends the
    stream when aiohttp's handler sees the connection lost."""

    __slots__ = ("_stream",)

    def __init__(self, stream: StreamReader) -> None:
        self._stream = stream

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self._stream.feed_data(data)
        return False, b""

    def feed_eof(self) -> None:
        self._stream.feed_eof()


class _Activity:
    """When a byte last moved through the tunnel, either way, and the one timer that notices
    `limit` seconds without any: moving a timestamp per chunk, not a timer handle."""

    __slots__ = ("_handle", "_limit", "_loop", "expired", "last")

    def __init__(self, limit: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._limit = limit
        self.last = self._loop.time()
        self.expired = asyncio.Event()
        self._handle = self._loop.call_at(self.last + limit, self._check)

    def moved(self) -> None:
        self.last = self._loop.time()

    def _check(self) -> None:
        due = self.last + self._limit
        if due > self._loop.time():
            self._handle = self._loop.call_at(due, self._check)
        else:
            self.expired.set()

    def cancel(self) -> None:
        self._handle.cancel()


async def _pump(source: StreamReader, sink: StreamWriter, activity: _Activity) -> None:
    """Copy one direction until its source ends (a close, or the connection lost)."""
    # A lost connection surfaces as aiohttp's ClientError on one side, ConnectionError on the
    # other: either way this direction has ended, which is what the caller waits for.
    with contextlib.suppress(ConnectionError, aiohttp.ClientError):
        while chunk := await source.readany():
            activity.moved()
            await sink.write(chunk)


class _ClientSide(asyncio.Protocol):
    """The client connection's protocol once it is a tunnel: bytes go straight to the tunnel's
    stream; everything else (flow control, the connection's end) to aiohttp's handler.

    aiohttp's handler drops every byte it receives once the server starts shutting down (it
    marks each connection closing so no new request starts). In a tunnel that would silence
    the client for the whole `shutdown.grace_s` while the upstream still talks to it.
    """

    __slots__ = ("_handler", "_stream")

    def __init__(self, handler: asyncio.Protocol, stream: StreamReader) -> None:
        self._handler = handler
        self._stream = stream

    def data_received(self, data: bytes) -> None:
        self._stream.feed_data(data)

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


def _stream(protocol: BaseProtocol) -> StreamReader:
    loop = asyncio.get_running_loop()
    return StreamReader(protocol, BUFFER_BYTES, loop=loop)


async def tunnel(
    request: web.Request, ctx: RequestContext, upstream: UpstreamResponse
) -> web.StreamResponse:
    """Answer the client's handshake with the upstream's 101 and relay until either side
    closes; the response returned is the 101, already sent."""
    upstream_protocol: ResponseHandler = upstream.detach()
    headers = client_response_headers(upstream.headers)
    headers[hdrs.UPGRADE] = upstream.headers.get(hdrs.UPGRADE, WEBSOCKET)
    headers[hdrs.CONNECTION] = "Upgrade"
    echo_request_id(headers, ctx.record)
    response = RelayResponse(status=101, reason=upstream.reason, headers=headers)
    response.force_close()  # after the tunnel the connection is not HTTP any more
    route = ctx.record.route
    try:
        writer = await response.prepare(request)
        if isinstance(writer, StreamWriter):
            writer.send_headers()
    except BaseException:
        upstream_protocol.close()
        raise
    TUNNELS_OPENED.labels(route).inc()
    try:
        reason = await _relay(request, upstream_protocol, ctx)
    except asyncio.CancelledError:  # the gateway is stopping (past shutdown.grace_s)
        TUNNELS_CLOSED.labels(route, "cancelled").inc()
        raise
    TUNNELS_CLOSED.labels(route, reason).inc()
    log.info("websocket tunnel on route %s closed: %s", route, reason)
    return response


async def _relay(
    request: web.Request, upstream_protocol: ResponseHandler, ctx: RequestContext
) -> str:
    """Both directions and the idle timer; the first to end ends the tunnel. Its reason."""
    loop = asyncio.get_running_loop()
    client_protocol = request.protocol
    from_client, from_upstream = _stream(client_protocol), _stream(upstream_protocol)
    client_protocol.set_parser(_Feed(from_client))  # type: ignore[arg-type]
    if request.transport is not None:
        request.transport.set_protocol(_ClientSide(client_protocol, from_client))
    upstream_protocol.set_parser(_Feed(from_upstream), from_upstream)
    activity = _Activity(ctx.state.config.limits.tunnel_idle_timeout_s)
    tasks = {
        loop.create_task(
            _pump(from_client, StreamWriter(upstream_protocol, loop), activity)
        ): "client_closed",
        loop.create_task(
            _pump(from_upstream, StreamWriter(client_protocol, loop), activity)
        ): "upstream_closed",
        loop.create_task(activity.expired.wait()): "idle_timeout",
    }
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        activity.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        upstream_protocol.close()
        if request.transport is not None:
            request.transport.close()
    return tasks[next(iter(done))]
