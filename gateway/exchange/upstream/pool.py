"""The upstream HTTP/1.1 client: pooled keep-alive connections, one request each, no extras.

Why not `aiohttp.ClientSession`: a profile of the success path put about a third of each
request's CPU inside `ClientSession._request`, almost all of it for features a transparent
proxy must switch off anyway (URL joining, cookies, redirects, auto headers, auth, traces,
retries). This client keeps what is worth keeping of aiohttp
(`gateway.exchange.upstream.round_trip`) and drops the rest. The pool decides which
connection a request gets:

- a connection returns to the pool only when its response was read whole, its request body
  was sent whole, and neither side asked to close;
- stale connections are noticed before use: a peer's close waiting in the kernel is polled
  for, an idle one is retired before the upstream's keep-alive timeout (`Keep-Alive:
  timeout=N`, else `limits.upstream_idle_timeout_s`), and one whose last answer was a 5xx
  (servers often close 1-4 ms after one) goes only to a request that could be replayed;
- fair shares (docs/transparency.md#fair-shares-of-the-pool): each route's requests hold at
  most its `routes[].max_connections`, and an answer that is a long-lived stream leaves the
  request limits for `limits.max_upstream_streams`, so streams cannot starve short requests.
  `PoolFull` says which of the gateway's own limits kept a connection away (nothing sent);
- one replay, as mature HTTP clients do: when a *reused* connection fails before any byte of
  an answer, a request that is safe to send again (no body or a small one kept whole, and an
  idempotent method or nothing written) goes once more on a fresh connection. Nothing else
  is ever retried (docs/transparency.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from aiohttp import hdrs
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.config.models import LimitsSpec
from gateway.exchange.shares import (
    OPEN_ENDED_STREAM_S,
    UNLIMITED,
    PoolFull,
    Share,
    is_event_stream,
    wake_first,
)
from gateway.exchange.upstream.deadline import ResponseDeadline
from gateway.exchange.upstream.links import (
    AttemptWatcher,
    Dialer,
    Interim,
    Link,
    Origin,
    peer_closed,
)
from gateway.exchange.upstream.round_trip import (
    Body,
    Exchange,
    UpstreamResponse,
    may_replay,
    replayable,
)
from gateway.fence.aiohttp_private import ResponseHandler, TimeoutHandle
from gateway.telemetry.metrics import UPSTREAM_REPLAYS, UPSTREAM_STREAMS

log = logging.getLogger("mendpoint.upstream")


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
        self._idle: dict[Origin, deque[Link]] = {}
        self._open = 0
        self._streams = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._shares: dict[str, Share] = {}
        self._unrouted = Share("", UNLIMITED)
        self._open_ended_answers: set[Link] = set()  # they may yet prove streams
        self._setting_apart: asyncio.TimerHandle | None = None
        # The wait for a free connection, as aiohttp's `connect` timeout counts it.
        self._wait_s = limits.connect_timeout_s * 2
        self._closed = False
        self._exchange = Exchange(limits, self._loop)
        self._dialer = Dialer(limits.connect_timeout_s, self._loop)
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
        body: Body = None,
        deadline: ResponseDeadline | None = None,
        *,
        idempotent: bool = False,
        interim: Interim | None = None,
        share: Share | None = None,
        attempts: AttemptWatcher | None = None,
    ) -> UpstreamResponse:
        """Send one request and return once the response head has arrived.

        `idempotent` (the route's idempotent methods) allows the one replay described in the
        module docstring; without it a request is replayed only if nothing was written.
        `share` is the route's part of the pool (`share()`); without one, the whole pool.
        Raises `PoolFull` when the gateway's own limits left no connection within the wait.
        `attempts` is told of each attempt as it starts and of each one that raised.
        """
        if share is None:
            share = self._unrouted
        total = TimeoutHandle(self._loop, self._limits.total_timeout_s)
        timer = total.timer()  # a no-op context when there is no total timeout
        total_handle = total.start()
        replayable_body = idempotent and replayable(body)
        fresh = False
        resend_count = 0
        while True:
            if attempts is not None:
                attempts.sending(resend_count, method, origin, target, headers)
            try:
                with timer:
                    conn = await self._acquire(
                        origin, share, replayable=replayable_body, fresh=fresh
                    )
            except BaseException as exc:
                if total_handle is not None:
                    total_handle.cancel()
                if attempts is not None:
                    attempts.failed(exc)
                raise
            conn.total = total_handle
            conn.interim = interim
            try:
                with timer:
                    return await self._exchange.run(
                        conn, origin, method, target, headers, body, deadline, timer, self
                    )
            except BaseException as exc:
                conn.total = None  # the same total timeout carries over to a replay
                self.release(origin, conn, reusable=False)
                if attempts is not None:
                    attempts.failed(exc)
                if fresh or not may_replay(conn, exc, idempotent, body):
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
            resend_count += 1

    def open_ended(self, conn: Link, headers: CIMultiDictProxy[str]) -> None:
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

    async def _acquire(
        self, origin: Origin, share: Share, *, replayable: bool = False, fresh: bool = False
    ) -> Link:
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
    ) -> Link:
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
            protocol = await self._dialer.connect(origin)
        except BaseException:
            self._open -= 1
            self._wake()
            raise
        assert protocol.transport is not None
        fd = protocol.transport.get_extra_info("socket").fileno()
        return Link(protocol, fd, self._limits.upstream_idle_timeout_s)

    def _take_idle(self, origin: Origin, replayable: bool) -> Link | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = self._loop.time()
        passed: list[Link] | None = None  # made only when needed: this runs per request
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

    async def _wait_for_room(self, origin: Origin, replayable: bool, fresh: bool) -> Link | None:
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

    def _set_apart(self, conn: Link) -> bool:
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

    def _done(self, conn: Link) -> None:
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

    def release(self, origin: Origin, conn: Link, *, reusable: bool) -> None:
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

    def detach(self, conn: Link) -> ResponseHandler:
        if conn.total is not None:
            conn.total.cancel()
            conn.total = None
        conn.protocol.read_timeout = None  # the lazy timer, if armed, then stops by itself
        self._done(conn)
        self._open -= 1
        self._wake()
        return conn.protocol

    def _discard(self, conn: Link) -> None:
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


__all__ = ["UpstreamClient"]
