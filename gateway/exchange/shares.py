"""The vocabulary of fair shares of the upstream pool.

What a route's share of the pool is, what makes an answer a stream that leaves the request
limits, and the exception that says the gateway's own limit, not the upstream, is why a
request got no connection. The accounting itself lives with the pool
(`gateway.exchange.upstream.pool`); why it works this way:
docs/transparency.md#fair-shares-of-the-pool.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from gateway.failure import Refusal

# An answer whose body has no declared end (chunked, or until the connection closes) still
# flowing this long after its head is a stream too, whatever its media type: a watch that
# sends JSON lines, a chunked long poll, a long download. Short answers end well before it;
# a request waiting at a full pool waits this long at most for one to be set apart.
OPEN_ENDED_STREAM_S = 2.0
UNLIMITED = 1 << 62  # a share with no limit of its own


def is_event_stream(content_type: str) -> bool:
    """`text/event-stream`, with or without parameters: a body of events with no end by
    design (server-sent events, WHATWG HTML), whatever sends it."""
    return content_type.partition(";")[0].strip().lower() == "text/event-stream"


class PoolFull(Exception):
    """No upstream connection within the wait because of the gateway's own limit: `refusal`
    says which one, `key` names its setting and `limit` its value. Nothing was sent."""

    def __init__(self, refusal: Refusal, key: str, limit: int) -> None:
        super().__init__(f"{key} ({limit}) reached")
        self.refusal = refusal
        self.key = key
        self.limit = limit

    @classmethod
    def route(cls, limit: int) -> PoolFull:
        """The route's share was full."""
        return cls(Refusal.ROUTE_CONNECTIONS, "routes[].max_connections", limit)

    @classmethod
    def total(cls, limit: int) -> PoolFull:
        """The pool was full."""
        return cls(Refusal.UPSTREAM_CONNECTIONS, "limits.max_upstream_connections", limit)


def wake_first(waiters: deque[asyncio.Future[None]]) -> None:
    """Give the turn to the first waiter still waiting."""
    while waiters:
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return


@dataclass(slots=True, eq=False)
class Share:
    """One route's part of the pool: how many connections its requests hold right now
    (waiting for an answer or reading a body; its streams not included), at most `limit`."""

    route: str
    limit: int
    busy: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)

    def leave(self) -> None:
        self.busy -= 1
        wake_first(self.waiters)


__all__ = [
    "OPEN_ENDED_STREAM_S",
    "UNLIMITED",
    "PoolFull",
    "Share",
    "is_event_stream",
    "wake_first",
]
