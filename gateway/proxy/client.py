"""The upstream HTTP/1.1 client: pooled keep-alive connections, one request each, no extras.

Why not `aiohttp.ClientSession`: a profile of the success path put about a third of each
request's CPU inside `ClientSession._request`, almost all of it for features a transparent
proxy must switch off anyway (URL joining, cookies, redirects, auto headers, auth, traces,
retries). This client keeps the parts worth keeping from aiohttp and drops the rest:

- aiohttp's `ResponseHandler` protocol with its C response parser (line and header limits,
  chunked and length framing, flow control, the per-read `sock_read` timeout);
- aiohttp's `StreamWriter` for the request (header serialisation that refuses CR/LF,
  chunking, back-pressure);
- one attempt per request: a connection that fails is never silently retried (docs/transparency.md);
- a connection returns to the pool only when its response was read whole, its request body
  was sent whole, and neither side asked to close.

Faults before the response head are raised as `UpstreamFault` carrying the `TransportKind`;
faults while the body is read surface from the payload stream as aiohttp's own errors.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import hdrs
from aiohttp.client_exceptions import SocketTimeoutError
from aiohttp.client_proto import ResponseHandler
from aiohttp.helpers import BaseTimerContext, TimeoutHandle
from aiohttp.http import HttpProcessingError, StreamWriter
from aiohttp.streams import StreamReader
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.config.models import LimitsSpec
from gateway.failure import TransportKind
from gateway.proxy.aiohttp_private import LazyReadTimeoutProtocol

# Methods that carry no body by definition; any other one without a body says Content-Length: 0
# (as aiohttp and curl do), so an upstream never waits for a body that will not come.
BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})
READ_CHUNK = 2**16


class UpstreamFault(aiohttp.ClientError):
    """The upstream could not be reached or answered with something that is not HTTP."""

    def __init__(self, kind: TransportKind, detail: str) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a route's requests go: the pool key."""

    scheme: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme == "https"


class UpstreamResponse:
    """An upstream answer whose body is read from `content` as it arrives."""

    __slots__ = ("_client", "_conn", "_origin", "content", "headers", "reason", "status")

    def __init__(
        self,
        status: int,
        reason: str,
        headers: CIMultiDictProxy[str],
        content: StreamReader,
        client: UpstreamClient,
        origin: Origin,
        conn: _Connection,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content = content
        self._client = client
        self._origin = origin
        self._conn: _Connection | None = conn

    @property
    def content_length(self) -> int | None:
        value = self.headers.get(hdrs.CONTENT_LENGTH)
        return int(value) if value is not None and value.isdigit() else None

    def release(self) -> None:
        """Hand the connection back: pooled if the exchange ended cleanly, closed otherwise."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client._release(self._origin, conn, reusable=self.content.is_eof())

    def close(self) -> None:
        """Drop the connection whatever its state (the body will not be read)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client._release(self._origin, conn, reusable=False)


@dataclass(slots=True)
class _Connection:
    protocol: ResponseHandler
    idle_since: float = 0.0
    sender: asyncio.Task[None] | None = None
    total: asyncio.TimerHandle | None = None


class ResponseDeadline:
    """One deadline for the upstream's response head and, on the failure path, its error body.

    `read_timeout_s` restarts on every byte, so an upstream that drips a byte every few
    hundred milliseconds would hold the request forever. This deadline never restarts: the
    head (and the error body the gateway reads before answering) must have arrived within
    `limits.response_timeout_s`. The clock starts once the request body has been forwarded
    whole, so a slow upload is never mistaken for a slow upstream. A success body is streamed
    to the client as it comes and is bounded by `read_timeout_s` alone, as without a gateway.

    The client arms it on the connection while it waits for the head: past the deadline the
    wait fails with `SocketTimeoutError` (`read_timeout`). A timer handle, not
    `asyncio.timeout()`: that costs a task lookup and, on Python 3.11, a `getpid()` system
    call per use, on every request.
    """

    __slots__ = ("_expire", "_handle", "_loop", "_seconds", "when")

    def __init__(self, seconds: float, loop: asyncio.AbstractEventLoop) -> None:
        self._seconds = seconds
        self._loop = loop
        self.when: float | None = None
        self._expire: Callable[[], None] | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Start the clock (idempotent): the whole request has been handed to the upstream."""
        if self.when is not None:
            return
        self.when = self._loop.time() + self._seconds
        if self._expire is not None:
            self._handle = self._loop.call_at(self.when, self._expire)

    def arm(self, expire: Callable[[], None]) -> None:
        """Call `expire` at the deadline (or once it is started) until `disarm`."""
        self._expire = expire
        if self.when is not None:
            self._handle = self._loop.call_at(self.when, expire)

    def disarm(self) -> None:
        self._expire = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class UpstreamClient:
    """One pool of keep-alive connections per upstream origin, capped in total."""

    def __init__(self, limits: LimitsSpec) -> None:
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        # The same for every response; worked out once, not per request.
        self._parsing: dict[str, Any] = {
            "read_until_eof": True,  # no length and no chunking: the close ends the body
            "auto_decompress": False,
            "read_timeout": limits.read_timeout_s,
            "read_bufsize": READ_CHUNK,
            "max_line_size": limits.max_line_bytes * 2,
            "max_field_size": limits.max_header_bytes * 2,
            "max_headers": max(limits.max_headers * 2, 128),
        }
        self._sweeper = self._loop.call_later(limits.keepalive_timeout_s, self._sweep)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def request(
        self,
        method: str,
        origin: Origin,
        target: str,
        headers: CIMultiDict[str],
        body: bytes | AsyncIterable[bytes] | None = None,
        deadline: ResponseDeadline | None = None,
    ) -> UpstreamResponse:
        """Send one request and return once the response head has arrived."""
        total = TimeoutHandle(self._loop, self._limits.total_timeout_s)
        timer = total.timer()  # a no-op context when there is no total timeout
        total_handle = total.start()
        try:
            with timer:
                conn = await self._acquire(origin)
        except BaseException:
            if total_handle is not None:
                total_handle.cancel()
            raise
        conn.total = total_handle
        try:
            with timer:
                await self._send(conn, method, target, headers, body, timer)
                if deadline is None:
                    return await self._response_head(conn, origin)
                deadline.arm(functools.partial(_too_late, conn.protocol))
                try:
                    return await self._response_head(conn, origin)
                finally:
                    deadline.disarm()
        except BaseException:
            self._release(origin, conn, reusable=False)
            raise

    async def _send(
        self,
        conn: _Connection,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: bytes | AsyncIterable[bytes] | None,
        timer: BaseTimerContext,
    ) -> None:
        protocol = conn.protocol
        protocol.set_response_params(
            timer=timer,  # the total timeout, if any, also bounds reading the body
            skip_payload=method == "HEAD",
            **self._parsing,
        )
        writer = StreamWriter(protocol, self._loop)
        if isinstance(body, bytes):
            headers[hdrs.CONTENT_LENGTH] = str(len(body))
        elif body is None:
            if method not in BODYLESS_METHODS and hdrs.CONTENT_LENGTH not in headers:
                headers[hdrs.CONTENT_LENGTH] = "0"
        elif hdrs.CONTENT_LENGTH not in headers:
            headers[hdrs.TRANSFER_ENCODING] = "chunked"
            writer.enable_chunking()
        # Serialised (and checked for CR/LF) into the writer's buffer; sent with the first
        # body bytes, or at once for a bodiless request: one write either way.
        await writer.write_headers(f"{method} {target} HTTP/1.1", headers)
        if body is None:
            protocol.start_timeout()
            writer.set_eof()
        else:
            conn.sender = self._loop.create_task(_send_body(writer, protocol, body))

    async def _response_head(self, conn: _Connection, origin: Origin) -> UpstreamResponse:
        protocol = conn.protocol
        while True:
            try:
                message, payload = await protocol.read()
            except HttpProcessingError as exc:
                raise UpstreamFault(TransportKind.INVALID_RESPONSE, repr(exc)) from exc
            # 1xx interim answers (100 Continue, 103 Early Hints) precede the real one; a 101
            # is final and the caller refuses it, since the gateway never asks to upgrade.
            if not (100 <= message.code < 200) or message.code == 101:
                break
        return UpstreamResponse(
            message.code, message.reason, message.headers, payload, self, origin, conn
        )

    async def _acquire(self, origin: Origin) -> _Connection:
        """A kept-alive connection to `origin`, else a new one once the cap leaves room."""
        conn = self._take_idle(origin)
        if conn is not None:
            return conn
        if self._open >= self._limits.max_upstream_connections:
            try:  # aiohttp's `connect` timeout: the wait for a free connection included
                async with asyncio.timeout(self._limits.connect_timeout_s * 2):
                    conn = await self._wait_for_room(origin)
            except TimeoutError:
                raise UpstreamFault(TransportKind.CONNECT_TIMEOUT, "no free connection") from None
            if conn is not None:
                return conn
        self._open += 1
        try:
            return _Connection(await self._connect(origin))
        except BaseException:
            self._open -= 1
            self._wake()
            raise

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = self._loop.time()
        keepalive = self._limits.keepalive_timeout_s
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closed by now
            protocol = conn.protocol
            fresh = now - conn.idle_since < keepalive
            if fresh and protocol.is_connected() and not protocol.should_close:
                return conn
            self._discard(conn)
        return None

    async def _wait_for_room(self, origin: Origin) -> _Connection | None:
        """At the cap: an idle connection to `origin` when one is released, or room for a new
        one (made by closing an idle connection to another origin, or by a close)."""
        while True:
            conn = self._take_idle(origin)
            if conn is not None:
                return conn
            if self._open < self._limits.max_upstream_connections:
                return None
            elsewhere = next((idle for idle in self._idle.values() if idle), None)
            if elsewhere is not None:
                self._discard(elsewhere.popleft())  # the longest idle: least likely needed
                continue
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken but leaving: pass the turn on
                else:
                    self._waiters.remove(waiter)
                raise

    @functools.cached_property
    def _tls_context(self) -> ssl.SSLContext:
        """Made on first use: loading the system's CA store takes tens of milliseconds."""
        return ssl.create_default_context()

    async def _connect(self, origin: Origin) -> ResponseHandler:
        loop = self._loop
        try:
            async with asyncio.timeout(self._limits.connect_timeout_s):
                _, protocol = await loop.create_connection(
                    lambda: LazyReadTimeoutProtocol(loop),
                    origin.host,
                    origin.port,
                    ssl=self._tls_context if origin.tls else None,
                    server_hostname=origin.host if origin.tls else None,
                )
        except TimeoutError:
            where = f"{origin.host}:{origin.port}"
            raise UpstreamFault(TransportKind.CONNECT_TIMEOUT, where) from None
        except socket.gaierror as exc:
            raise UpstreamFault(TransportKind.DNS_FAILURE, str(exc)) from exc
        except OSError as exc:  # refused, unreachable, TLS handshake (ssl.SSLError is one)
            kind = TransportKind.CONNECT_REFUSED
            if exc.errno == errno.ETIMEDOUT:
                kind = TransportKind.CONNECT_TIMEOUT
            raise UpstreamFault(kind, str(exc)) from exc
        return protocol

    def _release(self, origin: Origin, conn: _Connection, *, reusable: bool) -> None:
        if conn.total is not None:
            conn.total.cancel()
            conn.total = None
        sender, conn.sender = conn.sender, None
        if sender is not None and not sender.done():
            sender.cancel()  # the upstream answered before the body was sent: not reusable
            reusable = False
        protocol = conn.protocol
        if reusable and not self._closed and protocol.is_connected() and not protocol.should_close:
            conn.idle_since = self._loop.time()
            self._idle.setdefault(origin, deque()).append(conn)
            self._wake()
            return
        self._discard(conn)

    def _discard(self, conn: _Connection) -> None:
        conn.protocol.close()
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        """Close connections idle past `keepalive_timeout_s`, so no socket is held forever."""
        keepalive = self._limits.keepalive_timeout_s
        cutoff = self._loop.time() - keepalive
        for idle in self._idle.values():
            while idle and idle[0].idle_since < cutoff:
                self._discard(idle.popleft())
        self._sweeper = self._loop.call_later(keepalive / 2, self._sweep)

    async def close(self) -> None:
        self._closed = True
        self._sweeper.cancel()
        for idle in self._idle.values():
            while idle:
                self._discard(idle.popleft())
        self._idle.clear()


def _too_late(protocol: ResponseHandler) -> None:
    protocol.set_exception(SocketTimeoutError("no response within limits.response_timeout_s"))


async def _send_body(
    writer: StreamWriter, protocol: ResponseHandler, body: bytes | AsyncIterable[bytes]
) -> None:
    """Send the request body; a failure is handed to the response reader, never lost."""
    try:
        if isinstance(body, bytes):
            await writer.write_eof(body)
        else:
            async for chunk in body:
                await writer.write(chunk)
            await writer.write_eof()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the client's body failed (413/408) or the socket did
        # The reader waiting for the response head gets it; the connection is then discarded.
        protocol.set_exception(aiohttp.ClientConnectionError(f"request body: {exc!r}"), exc)
        return
    protocol.start_timeout()


__all__ = ["Origin", "ResponseDeadline", "UpstreamClient", "UpstreamFault", "UpstreamResponse"]
