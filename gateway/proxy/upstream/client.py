"""The upstream HTTP/1.1 client: pooled keep-alive connections, one request each, no extras.

Why not `aiohttp.ClientSession`: a profile of the success path put about a third of each
request's CPU inside `ClientSession._request`, almost all of it for features a transparent
proxy must switch off anyway (URL joining, cookies, redirects, auto headers, auth, traces,
retries). This client keeps the parts worth keeping from aiohttp and drops the rest:

- aiohttp's `ResponseHandler` protocol with its C response parser (line and header limits,
  chunked and length framing, flow control, the per-read `sock_read` timeout);
- aiohttp's `StreamWriter` for the request (header serialisation that refuses CR/LF,
  chunking, back-pressure);
- a connection returns to the pool only when its response was read whole, its request body
  was sent whole, and neither side asked to close;
- stale connections are noticed before they are used: a peer's close still waiting in the
  kernel is polled for, an idle connection is retired before the upstream's keep-alive timeout
  (`Keep-Alive: timeout=N`, else `limits.upstream_idle_timeout_s`), and a connection whose
  last answer was a 5xx (servers often close 1-4 ms after one) is given only to a request
  that could be replayed;
- fair shares (docs/transparency.md#fair-shares-of-the-pool): each route's requests hold at
  most its `routes[].max_connections`, and an answer that is a long-lived stream leaves the
  request limits for `limits.max_upstream_streams`, so streams cannot starve short requests.
  When the gateway's own limit is why no connection came within the wait, `PoolFull` says
  which (nothing was sent);
- one replay, as mature HTTP clients do: when a *reused* connection fails before any byte of
  an answer, a request that is safe to send again (no body or a small one kept whole, and an
  idempotent method or nothing written) goes once more on a fresh connection. Nothing else
  is ever retried (docs/transparency.md).

Faults before the response head are raised as `UpstreamFault` carrying the `TransportKind`;
faults while the body is read surface from the payload stream as aiohttp's own errors.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import re
import select
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import hdrs
from aiohttp.client_exceptions import (
    ClientOSError,
    ServerDisconnectedError,
    SocketTimeoutError,
)
from aiohttp.client_proto import ResponseHandler
from aiohttp.helpers import BaseTimerContext, TimeoutHandle
from aiohttp.http import HttpProcessingError, StreamWriter
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.streams import StreamReader
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.config.models import LimitsSpec, TlsSpec
from gateway.config.tls import tls_context
from gateway.failure import TransportKind
from gateway.fence.aiohttp_private import LazyReadTimeoutProtocol
from gateway.proxy.body import RequestBody
from gateway.proxy.shares import (
    OPEN_ENDED_STREAM_S,
    UNLIMITED,
    PoolFull,
    Share,
    is_event_stream,
    wake_first,
)
from gateway.telemetry.logs import Throttled
from gateway.telemetry.metrics import UPSTREAM_REPLAYS, UPSTREAM_STREAMS

log = logging.getLogger("mendpoint.upstream")

# Methods that carry no body by definition; any other one without a body says Content-Length: 0
# (as aiohttp and curl do), so an upstream never waits for a body that will not come.
BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})
# The upstream's StreamReader pauses reading above twice this and resumes below it.
# aiohttp's ClientSession uses 256 KiB (three times fewer pauses per 10 MB body and reads
# of uvloop's full 256,000 bytes), but relaying 10 MB cost 10-15 % more CPU with it in
# interleaved runs: smaller buffers keep the bytes in cache between recv and send.
READ_CHUNK = 2**16
# How long a request that says `Expect: 100-continue` waits for the upstream's 100 before its
# body goes anyway (RFC 9110 §10.1.1; curl waits 1 s too): an upstream may ignore Expect.
EXPECT_WAIT_S = 1.0
EMPTY_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
Interim = Callable[[int, str, CIMultiDictProxy[str]], Awaitable[None]]
"""Told of each interim answer passed on to the client: 100 Continue and 103 Early Hints."""
# How a reused connection dies when the upstream closed it first; timeouts are not among them
# (the upstream may still be working on the request).
CONNECTION_LOST = (ServerDisconnectedError, ClientOSError, ConnectionResetError)
_KEEP_ALIVE_TIMEOUT = re.compile(r"timeout\s*=\s*(\d+)", re.IGNORECASE)


class UpstreamFault(aiohttp.ClientError):
    """The upstream could not be reached or answered with something that is not HTTP."""

    def __init__(self, kind: TransportKind, detail: str) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a route's requests go, and how TLS is spoken there: the pool key. Routes to the
    same upstream with different TLS settings never share a connection."""

    scheme: str
    host: str
    port: int
    tls_spec: TlsSpec | None = None

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def server_name(self) -> str:
        spec = self.tls_spec
        return spec.server_name if spec is not None and spec.server_name else self.host


class _Protocol(LazyReadTimeoutProtocol):
    """The upstream connection's protocol; it notes whether any byte of an answer arrived
    since the request went out (a failure before that is one a replay may survive)."""

    answered = False

    def data_received(self, data: bytes) -> None:
        self.answered = True
        super().data_received(data)


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
            conn.after_error = self.status >= 500
            keep_alive = self.headers.get(hdrs.KEEP_ALIVE)
            if keep_alive is not None:
                conn.idle_limit = keep_alive_limit(keep_alive, conn.idle_limit)
            self._client._release(self._origin, conn, reusable=self.content.is_eof())

    def detach(self) -> ResponseHandler:
        """Take the connection out of the pool for good, open, after a 101 Switching Protocols:
        it now carries a tunnel (`proxy.tunnel`), no longer HTTP, and no longer counts
        against `limits.max_upstream_connections`. Its per-read timeout is switched off; the
        tunnel has its own idle timeout."""
        conn, self._conn = self._conn, None
        if conn is None:
            raise RuntimeError("the upstream connection was already released")
        return self._client._detach(conn)

    def close(self) -> None:
        """Drop the connection whatever its state (the body will not be read)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client._release(self._origin, conn, reusable=False)


@dataclass(slots=True, eq=False)
class _Connection:
    protocol: _Protocol
    fd: int  # polled for a close the event loop has not seen yet
    idle_limit: float  # seconds it may stay idle: our limit, or less if the upstream says so
    idle_since: float = 0.0
    reused: bool = False
    after_error: bool = False  # its last answer was a 5xx
    written: bool = False  # a byte of the request went out on it
    sender: asyncio.Task[None] | None = None
    total: asyncio.TimerHandle | None = None
    interim: Interim | None = None  # this exchange's listener for 100 and 103
    go_ahead: asyncio.Future[None] | None = None  # the upstream's 100 Continue, when asked
    share: Share | None = None  # while a request of this route holds it
    stream: bool = False  # carrying a stream: counted against limits.max_upstream_streams
    stream_due: float = 0.0  # when its answer, with no declared end, counts as a stream

    def expired(self, now: float) -> bool:
        return now - self.idle_since >= self.idle_limit


def keep_alive_limit(value: str, limit: float) -> float:
    """The idle time to allow after `Keep-Alive: timeout=N`: a margin below N, at most `limit`.

    The upstream's clock starts when it sent the answer, a little before it arrived here;
    closing a second early (half the time for N < 2) keeps the two from racing.
    """
    match = _KEEP_ALIVE_TIMEOUT.search(value)
    if match is None:
        return limit
    seconds = int(match.group(1))
    return min(limit, max(seconds - 1.0, seconds / 2))


def peer_closed(fd: int) -> bool:
    """Readable while idle: the upstream closed it (or sent bytes nobody asked for).

    The event loop sees a close only on its next turn; a busy loop can hand out a connection
    whose close is already in the kernel. One poll (~0.5 µs) catches that before writing.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


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
    """One pool of keep-alive connections per upstream origin, capped in total, with a share
    per route and a separate limit for the connections that carry streams.

    `_open` counts every connection but those carrying a stream (idle, connecting, and in
    use for a request), at most `limits.max_upstream_connections`; `_streams` the others, at
    most `limits.max_upstream_streams`. A stream found when that limit is full stays counted
    as a request (it cannot be refused once the upstream answered), and is set apart later if
    room comes.
    """

    def __init__(self, limits: LimitsSpec) -> None:
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._open = 0
        self._streams = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._shares: dict[str, Share] = {}
        self._unrouted = Share("", UNLIMITED)
        self._open_ended_answers: set[_Connection] = set()  # they may yet prove streams
        self._setting_apart: asyncio.TimerHandle | None = None
        # The wait for a free connection, as aiohttp's `connect` timeout counts it.
        self._wait_s = limits.connect_timeout_s * 2
        self._closed = False
        self._tls_contexts: dict[TlsSpec | None, ssl.SSLContext] = {}
        # The same for every response; worked out once, not per request.
        self._parsing: dict[str, Any] = {
            "read_until_eof": True,  # no length and no chunking: the close ends the body
            "auto_decompress": False,
            "read_timeout": limits.read_timeout_s,
            "read_bufsize": READ_CHUNK,
            "max_line_size": limits.max_response_header_bytes,
            "max_field_size": limits.max_response_header_bytes,
            "max_headers": limits.max_response_headers,
        }
        self._sweeper = self._loop.call_later(limits.upstream_idle_timeout_s / 2, self._sweep)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def share(self, route: str, limit: int | None) -> Share:
        """`route`'s share of the pool, at most `limit` connections (None: no limit of its
        own, only the pool's); made on first use, its limit following config reloads."""
        cap = UNLIMITED if limit is None else limit
        share = self._shares.get(route)
        if share is None:
            share = self._shares[route] = Share(route, cap)
        elif share.limit != cap:
            grew = cap > share.limit
            share.limit = cap
            while grew and share.waiters:  # they look again at the new limit
                wake_first(share.waiters)
        return share

    def counts(self) -> tuple[int, int]:
        """Connections open now: those not carrying a stream, and those that do."""
        return self._open, self._streams

    async def request(
        self,
        method: str,
        origin: Origin,
        target: str,
        headers: CIMultiDict[str],
        body: bytes | RequestBody | AsyncIterable[bytes] | None = None,
        deadline: ResponseDeadline | None = None,
        *,
        idempotent: bool = False,
        interim: Interim | None = None,
        share: Share | None = None,
    ) -> UpstreamResponse:
        """Send one request and return once the response head has arrived.

        `idempotent` (the route's idempotent methods) allows the one replay described in the
        module docstring; without it a request is replayed only if nothing was written.
        `share` is the route's part of the pool (`share()`); without one, the whole pool.
        Raises `PoolFull` when the gateway's own limits left no connection within the wait.
        """
        if share is None:
            share = self._unrouted
        total = TimeoutHandle(self._loop, self._limits.total_timeout_s)
        timer = total.timer()  # a no-op context when there is no total timeout
        total_handle = total.start()
        replayable = idempotent and _replayable(body)
        fresh = False
        while True:
            try:
                with timer:
                    conn = await self._acquire(origin, share, replayable=replayable, fresh=fresh)
            except BaseException:
                if total_handle is not None:
                    total_handle.cancel()
                raise
            conn.total = total_handle
            conn.interim = interim
            try:
                with timer:
                    return await self._exchange(
                        conn, origin, method, target, headers, body, deadline, timer
                    )
            except BaseException as exc:
                conn.total = None  # the same total timeout carries over to a replay
                self._release(origin, conn, reusable=False)
                if fresh or not _may_replay(conn, exc, idempotent, body):
                    if total_handle is not None:
                        total_handle.cancel()
                    raise
                UPSTREAM_REPLAYS.inc()
                log.info(
                    "upstream %s:%d closed a reused connection before answering (%s); "
                    "sending the %s once more on a new connection",
                    origin.host,
                    origin.port,
                    type(exc).__name__,
                    method,
                )
            fresh = True

    async def _exchange(
        self,
        conn: _Connection,
        origin: Origin,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: bytes | RequestBody | AsyncIterable[bytes] | None,
        deadline: ResponseDeadline | None,
        timer: BaseTimerContext,
    ) -> UpstreamResponse:
        await self._send(conn, method, target, headers, body, timer)
        if deadline is None:
            return await self._response_head(conn, origin)
        deadline.arm(functools.partial(_too_late, conn.protocol))
        try:
            return await self._response_head(conn, origin)
        finally:
            deadline.disarm()

    async def _send(
        self,
        conn: _Connection,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: bytes | RequestBody | AsyncIterable[bytes] | None,
        timer: BaseTimerContext,
    ) -> None:
        protocol = conn.protocol
        protocol.answered = conn.written = False
        conn.go_ahead = None
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
            conn.written = True
            writer.set_eof()
        else:
            if headers.get(hdrs.EXPECT, "").lower() == "100-continue":
                # The upstream decides whether the body is wanted: the head goes now, the
                # body after its 100 Continue (or EXPECT_WAIT_S of silence).
                conn.written = True
                writer.send_headers()
                conn.go_ahead = self._loop.create_future()
            declared = None if isinstance(body, bytes) else headers.get(hdrs.CONTENT_LENGTH)
            conn.sender = self._loop.create_task(
                _send_body(writer, conn, body, None if declared is None else int(declared))
            )

    async def _response_head(self, conn: _Connection, origin: Origin) -> UpstreamResponse:
        protocol = conn.protocol
        while True:
            try:
                message, payload = await protocol.read()
            except HttpProcessingError as exc:
                self._over_limits(origin, exc)
                raise UpstreamFault(TransportKind.INVALID_RESPONSE, repr(exc)) from exc
            # 1xx interim answers (100 Continue, 103 Early Hints) precede the real one; a 101
            # is final: a tunnel when the gateway asked for a WebSocket, else refused.
            if not (100 <= message.code < 200) or message.code == 101:
                break
            if message.code == 100:
                if conn.go_ahead is not None and not conn.go_ahead.done():
                    conn.go_ahead.set_result(None)
            elif conn.interim is not None:
                await conn.interim(message.code, message.reason, message.headers)
        headers = message.headers
        if hdrs.CONTENT_LENGTH not in headers and message.code != 101 and not payload.is_eof():
            self._open_ended(conn, headers)
        return UpstreamResponse(message.code, message.reason, headers, payload, self, origin, conn)

    def _open_ended(self, conn: _Connection, headers: CIMultiDictProxy[str]) -> None:
        """An answer with no declared end: a stream now if it says it is one (set apart at
        once, or as soon as there is room), else once it is still flowing
        `OPEN_ENDED_STREAM_S` from now."""
        due = self._loop.time()
        if is_event_stream(headers.get(hdrs.CONTENT_TYPE, "")):
            if self._set_apart(conn):
                return
        else:
            due += OPEN_ENDED_STREAM_S
        conn.stream_due = due
        self._open_ended_answers.add(conn)

    def _over_limits(self, origin: Origin, exc: HttpProcessingError) -> None:
        """Name the limit an upstream's answer broke, so an operator knows what to raise."""
        limits = self._limits
        if isinstance(exc, LineTooLong):
            limit = f"limits.max_response_header_bytes ({limits.max_response_header_bytes})"
        elif isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc.message):
            limit = f"limits.max_response_headers ({limits.max_response_headers})"
        else:
            return
        log.warning(
            "upstream %s:%d sent a response head over %s; answered 502",
            origin.host,
            origin.port,
            limit,
        )

    async def _acquire(
        self, origin: Origin, share: Share, *, replayable: bool = False, fresh: bool = False
    ) -> _Connection:
        """A connection to `origin` for one request of `share`'s route, once the route's
        share and the pool leave room, within `_wait_s` in all (else `PoolFull`)."""
        until = None
        if share.busy >= share.limit:
            until = self._loop.time() + self._wait_s
            await self._wait_for_share(share, until)
        share.busy += 1
        try:
            # A kept-alive connection is taken here, without a second coroutine per request.
            conn = None if fresh else self._take_idle(origin, replayable)
            if conn is None:
                conn = await self._connection(origin, replayable, fresh, until)
        except BaseException:
            share.leave()
            raise
        conn.share = share
        return conn

    async def _wait_for_share(self, share: Share, until: float) -> None:
        try:
            async with asyncio.timeout_at(until):
                while True:
                    self._set_apart_due()
                    if share.busy < share.limit:
                        return
                    await self._wait_on(share.waiters)
        except TimeoutError:
            raise PoolFull.route(share.limit) from None

    async def _connection(
        self, origin: Origin, replayable: bool, fresh: bool, until: float | None
    ) -> _Connection:
        """With no idle connection to `origin` at hand: one released while waiting at the cap,
        else a new one once the cap leaves room. A connection whose last answer was a 5xx
        goes only to a `replayable` request (`_take_idle`): servers often close right after
        an error, and only a replay survives that."""
        cap = self._limits.max_upstream_connections
        if self._open >= cap:
            if until is None:
                until = self._loop.time() + self._wait_s
            try:
                async with asyncio.timeout_at(until):
                    conn = await self._wait_for_room(origin, replayable, fresh)
            except TimeoutError:
                raise PoolFull.total(cap) from None
            if conn is not None:
                return conn
        self._open += 1
        try:
            protocol = await self._connect(origin)
        except BaseException:
            self._open -= 1
            self._wake()
            raise
        assert protocol.transport is not None
        fd = protocol.transport.get_extra_info("socket").fileno()
        return _Connection(protocol, fd, self._limits.upstream_idle_timeout_s)

    def _take_idle(self, origin: Origin, replayable: bool) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = self._loop.time()
        passed: list[_Connection] | None = None  # made only when needed: this runs per request
        found = None
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closed by now
            protocol = conn.protocol
            if (
                conn.expired(now)
                or not protocol.is_connected()
                or protocol.should_close
                or peer_closed(conn.fd)
            ):
                self._discard(conn)
            elif conn.after_error and not replayable:
                if passed is None:
                    passed = []
                passed.append(conn)  # left for a request that can survive its close
            else:
                conn.reused = True
                found = conn
                break
        if passed is not None:
            idle.extend(reversed(passed))
        return found

    async def _wait_for_room(
        self, origin: Origin, replayable: bool, fresh: bool
    ) -> _Connection | None:
        """At the cap: an idle connection to `origin` when one is released, or room for a new
        one (made by closing an idle connection to another origin, by a close, or by setting
        a stream apart)."""
        while True:
            self._set_apart_due()
            conn = None if fresh else self._take_idle(origin, replayable)
            if conn is not None:
                return conn
            if self._open < self._limits.max_upstream_connections:
                return None
            elsewhere = next((idle for idle in self._idle.values() if idle), None)
            if elsewhere is not None:
                self._discard(elsewhere.popleft())  # the longest idle: least likely needed
                continue
            await self._wait_on(self._waiters)

    async def _wait_on(self, waiters: deque[asyncio.Future[None]]) -> None:
        """Wait for a turn in `waiters`; one woken but leaving passes its turn on."""
        waiter = self._loop.create_future()
        waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                wake_first(waiters)
            else:
                waiters.remove(waiter)
            raise

    def _set_apart(self, conn: _Connection) -> bool:
        """`conn` carries a stream from now on: out of its route's share and the request
        pool, into `limits.max_upstream_streams`, if that has room. True if it was."""
        share = conn.share
        if share is None or conn.stream or self._streams >= self._limits.max_upstream_streams:
            return False
        conn.stream, conn.share = True, None
        self._streams += 1
        self._open -= 1
        if conn.stream_due:
            conn.stream_due = 0.0
            self._open_ended_answers.discard(conn)
        UPSTREAM_STREAMS.inc()
        share.leave()
        self._wake()
        return True

    def _set_apart_due(self) -> None:
        """Someone waits at a limit: set apart every answer that counts as a stream by now,
        while there is room for streams, and look again when the next one will."""
        answers = self._open_ended_answers
        if not answers:
            return
        now = self._loop.time()
        for conn in [c for c in answers if c.stream_due <= now]:
            if not self._set_apart(conn):
                return  # no room for streams: a stream's end wakes the waiters again
        if answers:
            when = min(c.stream_due for c in answers)
            timer = self._setting_apart
            if timer is None or timer.when() > when:
                if timer is not None:
                    timer.cancel()
                self._setting_apart = self._loop.call_at(when, self._look_again)

    def _look_again(self) -> None:
        self._setting_apart = None
        if self._waiters or any(share.waiters for share in self._shares.values()):
            self._set_apart_due()

    def _tls_context(self, spec: TlsSpec | None) -> ssl.SSLContext:
        """Made on first use: loading the system's CA store takes tens of milliseconds."""
        context = self._tls_contexts.get(spec)
        if context is None:
            context = self._tls_contexts[spec] = tls_context(spec)
        return context

    async def _connect(self, origin: Origin) -> _Protocol:
        loop = self._loop
        try:
            async with asyncio.timeout(self._limits.connect_timeout_s):
                _, protocol = await loop.create_connection(
                    lambda: _Protocol(loop),
                    origin.host,
                    origin.port,
                    ssl=self._tls_context(origin.tls_spec) if origin.tls else None,
                    server_hostname=origin.server_name if origin.tls else None,
                )
        except TimeoutError:
            where = f"{origin.host}:{origin.port}"
            raise UpstreamFault(TransportKind.CONNECT_TIMEOUT, where) from None
        except socket.gaierror as exc:
            raise UpstreamFault(TransportKind.DNS_FAILURE, str(exc)) from exc
        except ssl.SSLError as exc:  # before OSError, of which it is one
            problem = tls_problem(exc)
            _warn_tls(origin, problem)
            raise UpstreamFault(TransportKind.TLS, problem) from exc
        except (ConnectionResetError, ConnectionAbortedError) as exc:
            if not origin.tls:
                raise UpstreamFault(TransportKind.CONNECT_REFUSED, str(exc)) from exc
            # Accepted, then dropped in the handshake: typically a client certificate that the
            # upstream refused (or none when it requires one).
            problem = f"the upstream closed the connection during the TLS handshake ({exc!r})"
            _warn_tls(origin, problem)
            raise UpstreamFault(TransportKind.TLS, problem) from exc
        except OSError as exc:  # refused, unreachable
            kind = TransportKind.CONNECT_REFUSED
            if exc.errno == errno.ETIMEDOUT:
                kind = TransportKind.CONNECT_TIMEOUT
            raise UpstreamFault(kind, str(exc)) from exc
        return protocol

    def _done(self, conn: _Connection) -> None:
        """The exchange on `conn` is over: its route's place, or its stream's, is free; a
        connection that carried a stream counts among the others again."""
        if conn.stream_due:
            conn.stream_due = 0.0
            self._open_ended_answers.discard(conn)
        if conn.stream:
            conn.stream = False
            self._streams -= 1
            self._open += 1  # then pooled, or discarded if the pool has no room for it
            UPSTREAM_STREAMS.dec()
        share = conn.share
        if share is not None:
            conn.share = None
            share.busy -= 1
            if share.waiters:
                wake_first(share.waiters)

    def _release(self, origin: Origin, conn: _Connection, *, reusable: bool) -> None:
        if conn.total is not None:
            conn.total.cancel()
            conn.total = None
        sender, conn.sender = conn.sender, None
        if sender is not None and not sender.done():
            sender.cancel()  # the upstream answered before the body was sent: not reusable
            reusable = False
        self._done(conn)
        protocol = conn.protocol
        if (
            reusable
            and not self._closed
            and self._open <= self._limits.max_upstream_connections
            and protocol.is_connected()
            and not protocol.should_close
        ):
            conn.idle_since = self._loop.time()
            idle = self._idle.get(origin)
            if idle is None:  # not setdefault: that would make a deque per request
                idle = self._idle[origin] = deque()
            idle.append(conn)
            self._wake()
            return
        self._discard(conn)

    def _detach(self, conn: _Connection) -> ResponseHandler:
        if conn.total is not None:
            conn.total.cancel()
            conn.total = None
        conn.protocol.read_timeout = None  # the lazy timer, if armed, then stops by itself
        self._done(conn)
        self._open -= 1
        self._wake()
        return conn.protocol

    def _discard(self, conn: _Connection) -> None:
        conn.protocol.close()
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            wake_first(self._waiters)

    def _sweep(self) -> None:
        """Close connections idle past their limit: the upstream would close them soon, and
        a close that crosses a new request on the wire costs that request."""
        now = self._loop.time()
        for origin, idle in self._idle.items():
            if any(conn.expired(now) for conn in idle):
                keep = deque(conn for conn in idle if not conn.expired(now))
                for conn in idle:
                    if conn.expired(now):
                        self._discard(conn)
                self._idle[origin] = keep
        interval = self._limits.upstream_idle_timeout_s / 2
        self._sweeper = self._loop.call_later(interval, self._sweep)

    async def close(self) -> None:
        self._closed = True
        self._sweeper.cancel()
        if self._setting_apart is not None:
            self._setting_apart.cancel()
        for idle in self._idle.values():
            while idle:
                self._discard(idle.popleft())
        self._idle.clear()


def tls_problem(exc: ssl.SSLError) -> str:
    """What was wrong, in OpenSSL's words: "self-signed certificate", "Hostname mismatch…"."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    return str(exc.reason or exc)


TLS_WARNINGS = Throttled(log)


def _warn_tls(origin: Origin, problem: str) -> None:
    TLS_WARNINGS.warning(
        f"{origin.host}:{origin.port} {problem}",
        "TLS with upstream %s:%d (server name %s) failed: %s",
        origin.host,
        origin.port,
        origin.server_name,
        problem,
    )


def _too_late(protocol: ResponseHandler) -> None:
    protocol.set_exception(SocketTimeoutError("no response within limits.response_timeout_s"))


def _replayable(body: bytes | RequestBody | AsyncIterable[bytes] | None) -> bool:
    return (
        body is None
        or isinstance(body, bytes)
        or (isinstance(body, RequestBody) and body.replayable)
    )


def _may_replay(
    conn: _Connection,
    exc: BaseException,
    idempotent: bool,
    body: bytes | RequestBody | AsyncIterable[bytes] | None,
) -> bool:
    """A reused connection the upstream had closed, no byte of an answer, and a request that
    can be sent again unchanged: idempotent, or provably never written."""
    return (
        conn.reused
        and not conn.protocol.answered
        and isinstance(exc, CONNECTION_LOST)
        and _replayable(body)
        and (idempotent or not conn.written)
    )


class BodyLengthMismatch(Exception):
    """A streamed body did not match the Content-Length its head declares."""


async def _send_body(
    writer: StreamWriter,
    conn: _Connection,
    body: bytes | RequestBody | AsyncIterable[bytes],
    declared: int | None,
) -> None:
    """Send the request body; a failure is handed to the response reader, never lost.

    A streamed body framed by a declared Content-Length is held to it: a byte past it would
    be read by the upstream as the start of another request (a request smuggled past the
    route table), and a body that ends short would keep the upstream waiting. Either way the
    connection is dropped instead, with nothing extra written.
    """
    protocol = conn.protocol
    try:
        if conn.go_ahead is not None:
            await asyncio.wait((conn.go_ahead,), timeout=EXPECT_WAIT_S)
            if conn.interim is not None:  # the client may now send the body it holds back
                await conn.interim(100, "Continue", EMPTY_HEADERS)
        if isinstance(body, bytes):
            conn.written = True
            await writer.write_eof(body)
        else:
            left = declared
            async for chunk in body:
                if left is not None:
                    left -= len(chunk)
                    if left < 0:
                        raise BodyLengthMismatch(f"more than the declared {declared} bytes")
                conn.written = True  # the head goes out with the first chunk
                await writer.write(chunk)
            if left:
                raise BodyLengthMismatch(f"{left} bytes short of the declared {declared}")
            conn.written = True
            await writer.write_eof()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the client's body failed (413/408) or the socket did
        # The reader waiting for the response head gets it; the connection is then discarded.
        protocol.set_exception(aiohttp.ClientConnectionError(f"request body: {exc!r}"), exc)
        return
    protocol.start_timeout()


__all__ = ["Origin", "ResponseDeadline", "UpstreamClient", "UpstreamFault", "UpstreamResponse"]
