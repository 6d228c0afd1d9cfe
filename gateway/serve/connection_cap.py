"""The client connection cap (`limits.max_connections`): counted from the accept, refused early.

A connection over the cap is answered 503 before anything is read and closed, so a flood
costs the gateway one write per connection, never a parser or a handler.
"""

from __future__ import annotations

import asyncio
from typing import cast

OVERLOADED_BODY = b"Gateway connection limit reached\n"
OVERLOADED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(OVERLOADED_BODY), OVERLOADED_BODY)
)


class ConnectionCap:
    """Client connections counted from the moment they are accepted until they end.

    aiohttp registers a connection in `server.connections` only in `connection_made`, a turn
    of the event loop after the accept, and the loop accepts up to the whole backlog in one
    turn: a burst counted there overshoots the cap by up to a backlog (5,200 at once held
    4,627 against 4,096). The factory counts here instead, before the connection exists.
    """

    __slots__ = ("limit", "open")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    @property
    def full(self) -> bool:
        return self.open >= self.limit

    def accepted(self) -> None:
        self.open += 1

    def ended(self) -> None:
        self.open -= 1


class Refuse(asyncio.Protocol):
    """A connection over the cap: answered 503 before anything is read, then closed."""

    def __init__(self, answer: bytes | None) -> None:
        self.answer = OVERLOADED if answer is None else answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, so this is a cast.
        transport = cast(asyncio.Transport, transport)
        transport.write(self.answer)
        transport.close()
