"""Which HTTP stream of a bridge session each message of its child goes to.

A stdio server writes every message on one pipe; Streamable HTTP has a stream per POST and
one GET stream per session, and a client reads a message as belonging to the stream it came
on (docs/mcp.md#which-stream-a-message-takes). So each line is routed:

- a response, to the POST that sent its request;
- `notifications/progress`, to the POST whose request carries its `progressToken`;
- a server request or notification while the client requests in flight in the session are
  all one POST's (one call, or one batch), to that POST's stream: nothing on the pipe says
  which request a log line, a `sampling/createMessage` or an `elicitation/create` belongs
  to, and with one call running it can only be that one (or none: the GET stream is the
  other place the spec allows). A server's `notifications/cancelled` for one of its own
  requests follows that request;
- everything else (list-changed and resource-updated notifications, and any message while
  several calls or none are in flight), to the session's GET stream, queued while none is
  open: at most `OUTBOX_MESSAGES` messages and `OUTBOX_BYTES` bytes, the oldest dropped
  (counted in the log) so a client that never listens cannot grow the gateway's memory.

A request the client cancels (`notifications/cancelled`) is never answered by the gateway:
when the session ends, its POST ends with nothing written for it, as a direct server's does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.failure import Refusal
from gateway.mcp.jsonrpc import RequestKey, request_key

log = logging.getLogger("mendpoint.mcp")

OUTBOX_MESSAGES = 1024
OUTBOX_BYTES = 8 << 20
SESSION_WIDE = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
"""Notifications about the session, never about one call: always the GET stream."""


@dataclass(frozen=True, slots=True)
class Line:
    """One message for a client: the child's line as written and what it holds, or the
    gateway's own answer for a request the server will never answer, and why."""

    raw: bytes
    message: Any
    refusal: Refusal | None = None


@dataclass(eq=False)
class Waiter:
    """One POST waiting for the responses to its requests (and, as a stream, server messages).

    Lines wait in a deque, and the POST in one future while there is none: an `asyncio.Queue`
    per POST cost about 4 µs, more than the rest of the waiting (one reader, one writer).
    """

    outstanding: dict[RequestKey, str]
    stream: bool
    tokens: dict[RequestKey, RequestKey] = field(default_factory=dict)
    """The `progressToken` of each of its requests that carries one."""
    cancelled: set[RequestKey] = field(default_factory=set)
    """Its requests the client withdrew: the gateway never answers them."""
    relayed: set[RequestKey] = field(default_factory=set)
    """The server's own requests sent on this stream (their cancellation follows them)."""
    arrived: deque[Line] = field(default_factory=deque)
    _wake: asyncio.Future[None] | None = None

    def deliver(self, key: RequestKey, line: Line) -> None:
        """The response to `key`."""
        self.outstanding.pop(key, None)
        self.cancelled.discard(key)
        self.push(line)

    def push(self, line: Line) -> None:
        """A line for this POST: a response, or a server message for its stream."""
        self.arrived.append(line)
        self._wakeup()

    def withdraw(self, key: RequestKey) -> None:
        """`key` will have no answer on this POST (cancelled, and the session is over)."""
        self.outstanding.pop(key, None)
        self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    @property
    def live(self) -> int:
        """Requests of this POST still waiting for an answer the client wants."""
        return sum(1 for key in self.outstanding if key not in self.cancelled)

    def answered(self) -> bool:
        """Every request has its response and nothing is left to read."""
        return not self.outstanding and not self.arrived

    async def lines(self) -> AsyncIterator[Line]:
        """Lines in arrival order until no request of this POST is waiting any more."""
        while True:
            while self.arrived:
                yield self.arrived.popleft()
            if not self.outstanding:
                return
            self._wake = asyncio.get_running_loop().create_future()
            try:
                await self._wake
            finally:
                self._wake = None


class Outbox:
    """The session's GET stream: messages for no POST, queued (bounded) while none listens."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.listening = False
        self.closed = False
        self._lines: deque[bytes] = deque()
        self._bytes = 0
        self._dropped = 0
        self._wake: asyncio.Future[None] | None = None

    def put(self, line: bytes) -> None:
        if self.closed:
            return
        self._lines.append(line)
        self._bytes += len(line)
        while len(self._lines) > OUTBOX_MESSAGES or self._bytes > OUTBOX_BYTES:
            self._bytes -= len(self._lines.popleft())
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 100 == 0:
                log.warning(
                    "MCP bridge session %s: %d server messages dropped, no GET stream reads them",
                    self.session_id,
                    self._dropped,
                )
        self._wakeup()

    def close(self) -> None:
        self.closed = True
        self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def lines(self) -> AsyncIterator[bytes]:
        """What was queued, then each new line, until the session ends (or `close`)."""
        while True:
            while self._lines:
                line = self._lines.popleft()
                self._bytes -= len(line)
                yield line
            if self.closed:
                return
            self._wake = asyncio.get_running_loop().create_future()
            try:
                await self._wake
            finally:
                self._wake = None


class Streams:
    """The POSTs waiting in one session, and where each line of its child goes."""

    def __init__(self, session_id: str) -> None:
        self.outbox = Outbox(session_id)
        self._waiting: dict[RequestKey, Waiter] = {}
        self._progress: dict[RequestKey, Waiter] = {}
        self._relayed: dict[RequestKey, Waiter] = {}

    def add(self, waiter: Waiter) -> None:
        for key in waiter.outstanding:
            self._waiting[key] = waiter
        for token in waiter.tokens.values():
            self._progress[token] = waiter

    def remove(self, waiter: Waiter) -> None:
        """The POST is over (answered, or its client left): its late lines go elsewhere."""
        for key in waiter.outstanding:
            if self._waiting.get(key) is waiter:
                del self._waiting[key]
        for table, keys in (
            (self._progress, waiter.tokens.values()),
            (self._relayed, waiter.relayed),
        ):
            for key in keys:
                if table.get(key) is waiter:
                    del table[key]

    def cancel(self, keys: Iterable[RequestKey]) -> None:
        """The client withdrew these requests: no answer of the gateway's will follow."""
        for key in keys:
            waiter = self._waiting.get(key)
            if waiter is not None and key in waiter.outstanding:
                waiter.cancelled.add(key)

    def answered(self, keys: Iterable[RequestKey]) -> None:
        """The client answered these server requests: their cancellation goes nowhere now."""
        for key in keys:
            waiter = self._relayed.pop(key, None)
            if waiter is not None:
                waiter.relayed.discard(key)

    def waiter_for(self, key: RequestKey) -> Waiter | None:
        """The POST waiting for the response to `key`, which it takes: it is answered."""
        waiter = self._waiting.pop(key, None)
        if waiter is not None:
            token = waiter.tokens.pop(key, None)
            if token is not None and self._progress.get(token) is waiter:
                del self._progress[token]
        return waiter

    def route(self, line: bytes, message: Any) -> None:
        """A request or notification of the server's own: its POST stream, or the GET's."""
        target = self._stream_of(message)
        if target is None:
            self.outbox.put(line)
            return
        key = request_key(message.get("id")) if "id" in message else None
        if key is not None:
            self._relayed[key] = target
            target.relayed.add(key)
        target.push(Line(line, message))

    def _stream_of(self, message: Any) -> Waiter | None:
        if not isinstance(message, dict):
            return None
        method = message.get("method")
        if method in SESSION_WIDE or not isinstance(method, str):
            return None
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "notifications/progress":
            return _open(_find(self._progress, params.get("progressToken")))
        if method == "notifications/cancelled" and "id" not in message:
            return _open(_find(self._relayed, params.get("requestId")))
        # The requests in flight are all one POST's (one call, or one batch): it is theirs.
        waiters = {id(w): w for w in self._waiting.values() if w.live}
        return _open(next(iter(waiters.values()))) if len(waiters) == 1 else None

    def end(self) -> list[Waiter]:
        """The session is over: every POST still waiting, and the GET stream closed."""
        waiters = list({id(w): w for w in self._waiting.values()}.values())
        self._waiting.clear()
        self._progress.clear()
        self._relayed.clear()
        self.outbox.close()
        return waiters


def _find(table: dict[RequestKey, Waiter], value: Any) -> Waiter | None:
    key = request_key(value)
    return None if key is None else table.get(key)


def _open(waiter: Waiter | None) -> Waiter | None:
    """The POST if it is an event stream still waiting (a JSON answer carries one message)."""
    return waiter if waiter is not None and waiter.stream and waiter.outstanding else None


__all__ = ["OUTBOX_BYTES", "OUTBOX_MESSAGES", "Line", "Outbox", "Streams", "Waiter"]
