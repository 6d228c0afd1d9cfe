"""Bridge sessions: one stdio MCP server child process per MCP session, and its lifecycle.

A stdio server holds one conversation, so each MCP session of a bridge route (a `type: mcp`
route with `command:`) gets its own child process. `Bridges` opens a session for an
`initialize` (at most `max_sessions` per route, and a holder's share of those:
`max_sessions_per_caller` for a named caller, `max_sessions_per_address` for an address,
`bridge_holders`; counted across workers, `session_ledger`) and finds it again by its id and
holder: for anyone else the session does not exist
(docs/mcp.md#sessions-belong-to-their-caller). A session ends on
DELETE, after `session_idle_s` without a request, when its child exits, or at gateway shutdown,
and ending it kills the child's process group. While it lives, a session routes each line the
child writes to the HTTP stream it belongs to (`bridge_streams`). Every request still waiting
when it ends gets a JSON-RPC error (`server_gone`) instead of hanging, except those the client
cancelled: the gateway never answers a cancelled request.

The HTTP side (what a POST, GET or DELETE does with a session) is `bridge_http`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

from gateway.config.route_model import RouteSpec
from gateway.config.session_keys import SessionKeys
from gateway.failure import Refusal
from gateway.mcp.bridge_holders import Holder
from gateway.mcp.bridge_owners import Owners
from gateway.mcp.bridge_streams import Line, Streams, Waiter
from gateway.mcp.child import Child
from gateway.mcp.jsonrpc import (
    RequestKey,
    cancelled_requests,
    encode,
    parse_message,
    progress_tokens,
    request_key,
    responses_in,
)
from gateway.mcp.lines import Overlong, overlong_id
from gateway.mcp.rpc_errors import server_gone, too_large
from gateway.mcp.session_ledger import LocalLedger, SessionCounts

log = logging.getLogger("mendpoint.mcp")

EXIT_GRACE_S = 2.0
SHARE_SETTINGS = {"caller": "max_sessions_per_caller", "address": "max_sessions_per_address"}


class SessionsFull(Exception):
    """The route already runs `max_sessions` children."""


class HolderSessionsFull(Exception):
    """This holder already has its share of the route's sessions (`sessions_for`)."""

    def __init__(self, limit: int, retry_after_s: float, setting: str) -> None:
        super().__init__(limit, retry_after_s, setting)
        self.limit = limit
        self.setting = setting
        """The route setting that bounds this holder, as the 429 names it."""
        self.retry_after_s = retry_after_s
        """When the first of its sessions would end idle, if it stays unused."""


class BridgeSession:
    """One MCP session: its child process and the HTTP requests waiting on it."""

    def __init__(
        self,
        session_id: str,
        route: str,
        holder: Holder,
        child: Child,
        idle_s: float,
        on_end: Callable[[BridgeSession], None],
    ) -> None:
        self.id = session_id
        self.route = route
        self.holder = holder
        self.child = child
        self.idle_s = idle_s
        self.in_flight = 0
        self.last_active = time.monotonic()
        self._on_end = on_end
        self._streams = Streams(session_id)
        self._listening = False
        self._ending: asyncio.Task[None] | None = None
        self._tasks = [
            asyncio.create_task(self._pump()),
            asyncio.create_task(self._watch_idle()),
        ]

    @property
    def ended(self) -> bool:
        return self._ending is not None

    def idle_in(self) -> float:
        """Seconds until the idle reaper ends this session if nobody uses it (a POST in
        flight keeps it alive: then a whole `idle_s`)."""
        if self.in_flight:
            return self.idle_s
        return max(0.0, self.last_active + self.idle_s - time.monotonic())

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """A POST in flight: the session is not idle until it is answered."""
        self.in_flight += 1
        self.last_active = time.monotonic()
        try:
            yield
        finally:
            self.in_flight -= 1
            self.last_active = time.monotonic()

    async def send(self, data: bytes) -> None:
        """Write lines to the child; a child that is gone answers the waiters itself (`end`)."""
        try:
            await self.child.write(data)
        except (ConnectionError, OSError):
            log.info("MCP bridge session %s: the server no longer reads its stdin", self.id)

    def expect(self, outstanding: dict[RequestKey, str], stream: bool, message: Any) -> Waiter:
        """A POST sending the requests `outstanding` (from `message`) waits for their answers."""
        waiter = Waiter(dict(outstanding), stream, dict(progress_tokens(message)))
        if self.ended:
            _answer_gone(waiter)
            return waiter
        self._streams.add(waiter)
        return waiter

    def note(self, message: Any) -> None:
        """What a POST without requests tells the session: requests the client cancels, and
        its answers to the server's own requests."""
        self._streams.cancel(cancelled_requests(message))
        self._streams.answered(responses_in(message))

    def forget(self, waiter: Waiter) -> None:
        """The POST is over (answered, or its client left): its late responses are dropped."""
        self._streams.remove(waiter)

    def listen(self) -> AsyncGenerator[bytes] | None:
        """The GET stream's lines (what was queued first); None when one is already open."""
        if self._listening or self.ended:
            return None
        self.last_active = time.monotonic()
        self._listening = True
        return self._listen()

    async def _listen(self) -> AsyncGenerator[bytes]:
        try:
            async for line in self._streams.outbox.lines():
                yield line
        finally:
            self._listening = False

    def close_listener(self) -> None:
        self._streams.outbox.close()

    @property
    def ending(self) -> asyncio.Task[None] | None:
        return self._ending

    async def end(self, why: str, exit_grace_s: float = EXIT_GRACE_S) -> None:
        """Stop the child (process group included) and release everyone waiting on it; the
        child gets `exit_grace_s` to exit by itself before its group is killed.

        Shielded: a DELETE whose client hangs up mid-way still kills the child.
        """
        if self._ending is None:
            self._ending = asyncio.create_task(self._shut(why, exit_grace_s))
        await asyncio.shield(self._ending)

    async def _shut(self, why: str, exit_grace_s: float) -> None:
        log.info("MCP bridge session %s ends (%s), pid %d", self.id, why, self.child.pid)
        self._on_end(self)
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        for waiter in self._streams.end():
            _answer_gone(waiter)
        self.close_listener()
        await self.child.stop(exit_grace_s)

    async def _pump(self) -> None:
        """Route each line the child writes; the child's exit ends the session."""
        while (line := await self.child.readline()) != b"":
            if isinstance(line, Overlong):
                await self._too_large(line)
                continue
            self._dispatch(line)
        await self.end("server exited")

    async def _too_large(self, line: Overlong) -> None:
        """A message over `mcp.max_message_bytes`: its request gets an error instead, never
        silence (the POST waiting for it would hang). Read through, never buffered."""
        await line.drain()
        key = request_key(overlong_id(line))
        waiter = self._streams.waiter_for(key) if key is not None else None
        log.warning(
            "MCP bridge session %s: a %d-byte message over the size limit %s",
            self.id,
            line.size,
            "answered with an error" if waiter is not None else "dropped",
        )
        if waiter is not None and key is not None:
            method = waiter.outstanding.get(key, "the request")
            error = too_large(key[1], method, line.size, self.child.limit)
            waiter.deliver(key, Line((encode(error) or b"") + b"\n", error))

    def _dispatch(self, line: bytes) -> None:
        message = parse_message(line)
        if message is None:
            log.debug("MCP bridge session %s: non-JSON line from the server dropped", self.id)
            return
        key = _response_key(message)
        if key is not None:
            waiter = self._streams.waiter_for(key)
            if waiter is not None:
                waiter.deliver(key, Line(line, message))
            return
        self._streams.route(line, message)

    async def _watch_idle(self) -> None:
        while True:
            due = self.last_active + self.idle_s - time.monotonic()
            if due <= 0 and not self.in_flight:
                break
            await asyncio.sleep(due if due > 0 else self.idle_s / 4)
        await self.end("idle")


class Bridges:
    """Every bridge session of the app, by id; lives across config reloads."""

    def __init__(self, keys: SessionKeys | None = None) -> None:
        self._sessions: dict[str, BridgeSession] = {}
        # What counts sessions against the bounds: this process, or under `serve --workers`
        # the supervisor, for every worker (gateway.serve.workers sets it).
        self.counts: SessionCounts = LocalLedger()
        # Sessions already ending (their child may still be exiting): shutdown waits for
        # them too, so no child process outlives the gateway's event loop.
        self._closing: set[BridgeSession] = set()
        # The processes holding the sessions this one does not: sibling workers under
        # `serve --workers N`, other replicas with `fleet.sessions` (`keys` signs the ids).
        self.owners = Owners(keys)

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str, route: str, holder: Holder) -> BridgeSession | None:
        """The session, if it is this route's and `holder`'s; None as for an unknown id
        otherwise, so another caller learns nothing, not even that the id exists."""
        session = self._sessions.get(session_id)
        if session is None or session.route != route or session.holder != holder:
            return None
        return session

    async def open(self, spec: RouteSpec, limit: int, holder: Holder) -> BridgeSession:
        """Start a child for a new session of `holder`'s; HolderSessionsFull, SessionsFull or
        OSError (cannot start) otherwise. The holder's own bound is checked first: a caller
        at it is told to end a session of its own, not that the route is busy."""
        assert spec.command is not None
        route, share = spec.name, spec.sessions_for(holder.kind)
        verdict = await self.counts.claim(route, str(holder), share, spec.max_sessions)
        if verdict == "holder":
            mine = (s for s in self._sessions.values() if s.route == route and s.holder == holder)
            first_idle = min((s.idle_in() for s in mine), default=spec.session_idle_s)
            raise HolderSessionsFull(share, first_idle, SHARE_SETTINGS[holder.kind])
        if verdict == "route":
            raise SessionsFull
        try:
            child = await Child.start(list(spec.command), limit)
        except BaseException:
            self.counts.release(route, str(holder))
            raise
        session_id = self.owners.new_session_id()
        session = BridgeSession(session_id, route, holder, child, spec.session_idle_s, self._drop)
        self._sessions[session_id] = session
        log.info("MCP bridge session %s started for %s, pid %d", session_id, holder, child.pid)
        return session

    def _drop(self, session: BridgeSession) -> None:
        if self._sessions.pop(session.id, None) is not None:
            self.counts.release(session.route, str(session.holder))
        self._closing.add(session)
        ending = session.ending
        if ending is not None:
            ending.add_done_callback(lambda _: self._closing.discard(session))

    def close_listeners(self) -> None:
        """Shutdown begins: end GET streams so they do not hold the drain for `grace_s`."""
        for session in self._sessions.values():
            session.close_listener()

    async def close_all(self, stop_by: float | None = None) -> None:
        """Gateway shutdown: every child is killed, none outlives the gateway. `stop_by` (a
        loop time) is when the drain must be over: a child gets what is left of it to exit
        by itself, at most `EXIT_GRACE_S`, and none once the grace is spent."""
        grace = EXIT_GRACE_S
        if stop_by is not None:
            left = stop_by - asyncio.get_running_loop().time()
            grace = min(grace, max(0.0, left))
        sessions = [*self._sessions.values(), *self._closing]
        await asyncio.gather(*(s.end("gateway shutdown", grace) for s in sessions))
        await self.owners.close()


def _answer_gone(waiter: Waiter) -> None:
    """The server is gone: each request of `waiter` gets the gateway's answer saying so, but
    those the client cancelled, which nobody answers (their POST just ends)."""
    for key, method in list(waiter.outstanding.items()):
        if key in waiter.cancelled:
            waiter.withdraw(key)
            continue
        gone = server_gone(key[1], method)
        line = Line((encode(gone) or b"") + b"\n", gone, Refusal.SESSION_SERVER_EXITED)
        waiter.deliver(key, line)


def _response_key(message: Any) -> RequestKey | None:
    if not isinstance(message, dict) or "method" in message:
        return None
    if "result" not in message and "error" not in message:
        return None
    return request_key(message.get("id"))


__all__ = ["BridgeSession", "Bridges", "HolderSessionsFull", "SessionsFull", "Waiter"]
