"""The bridge: a `type: mcp` route with `command:` serves a stdio MCP server over Streamable HTTP.

This is how a team exposes a local tool server to remote agents with upgraded errors. A stdio
server holds one conversation, so each MCP session gets its own child process: an `initialize`
POST without `Mcp-Session-Id` starts one (at most `max_sessions` per route) and the answer
names the new session; later requests are routed by that id; DELETE, `session_idle_s` without a
request, or gateway shutdown end it and kill the child's process group.

A POST's requests are written to the child as lines (batches one message a line, since stdio
servers read single messages); the POST then waits for the responses with those ids. It is
answered as `text/event-stream` when the client accepts it, so the server's own requests and
notifications made while the call runs (progress, logging, sampling) reach the client on the
same stream; otherwise as one `application/json` body. Server messages with no POST stream open
go to the session's GET stream, or are dropped when there is none. Responses are upgraded like
on every other transport (`rewrite_payload`, under the POST's own mode and caller); every other
message is the server's line byte for byte. Not supported: resuming a stream (`Last-Event-ID`;
the child keeps no event log) and the stateless 2026-07-28 revision (a stdio server needs its
`initialize`, so requests without a session are refused with 400).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from gateway.config.models import RouteSpec
from gateway.envelope import dump
from gateway.failure import TransportKind
from gateway.mcp.child import Child
from gateway.mcp.exchange import HttpExchange, Tracker, rewrite_payload
from gateway.mcp.jsonrpc import (
    RequestKey,
    RequestTable,
    encode,
    parse_message,
    request_key,
    requests_in,
    server_gone,
)
from gateway.mcp.upgrade import Upgrader
from gateway.proxy.context import RequestContext
from gateway.proxy.failure_path import answer_transport_failure

log = logging.getLogger("mendpoint.mcp")

SESSION_HEADER = "Mcp-Session-Id"
REQUEST_ID = "X-Request-Id"
EXIT_GRACE_S = 2.0
PARSE_ERROR = -32700
BAD_REQUEST = -32000
SESSION_NOT_FOUND = -32001


class SessionsFull(Exception):
    """The route already runs `max_sessions` children."""


@dataclass(eq=False)
class Waiter:
    """One POST waiting for the responses to its requests (and, as a stream, server messages)."""

    outstanding: dict[RequestKey, str]
    stream: bool
    queue: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)

    def deliver(self, key: RequestKey, line: bytes) -> None:
        self.outstanding.pop(key, None)
        self.queue.put_nowait(line)

    async def lines(self) -> AsyncIterator[bytes]:
        """Lines in arrival order until every request of this POST has its response."""
        while self.outstanding or not self.queue.empty():
            yield await self.queue.get()


class BridgeSession:
    """One MCP session: its child process and the HTTP requests waiting on it."""

    def __init__(
        self,
        session_id: str,
        route: str,
        child: Child,
        idle_s: float,
        on_end: Callable[[BridgeSession], None],
    ) -> None:
        self.id = session_id
        self.route = route
        self.child = child
        self.idle_s = idle_s
        self.in_flight = 0
        self.last_active = time.monotonic()
        self._on_end = on_end
        self._waiting: dict[RequestKey, Waiter] = {}
        self._streams: list[Waiter] = []
        self._listener: asyncio.Queue[bytes | None] | None = None
        self._ending: asyncio.Task[None] | None = None
        self._tasks = [
            asyncio.create_task(self._pump()),
            asyncio.create_task(self._watch_idle()),
        ]

    @property
    def ended(self) -> bool:
        return self._ending is not None

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

    def expect(self, outstanding: dict[RequestKey, str], stream: bool) -> Waiter:
        waiter = Waiter(dict(outstanding), stream)
        if self.ended:
            _answer_gone(waiter)
            return waiter
        for key in outstanding:
            self._waiting[key] = waiter
        if stream:
            self._streams.append(waiter)
        return waiter

    def forget(self, waiter: Waiter) -> None:
        """The POST is over (answered, or its client left): its late responses are dropped."""
        for key in waiter.outstanding:
            if self._waiting.get(key) is waiter:
                del self._waiting[key]
        if waiter in self._streams:
            self._streams.remove(waiter)

    def listen(self) -> asyncio.Queue[bytes | None] | None:
        """The GET stream's queue; None when one is already open (one per session)."""
        if self._listener is not None or self.ended:
            return None
        self.last_active = time.monotonic()
        self._listener = asyncio.Queue()
        return self._listener

    def unlisten(self, queue: asyncio.Queue[bytes | None]) -> None:
        if self._listener is queue:
            self._listener = None

    def close_listener(self) -> None:
        if self._listener is not None:
            self._listener.put_nowait(None)

    @property
    def ending(self) -> asyncio.Task[None] | None:
        return self._ending

    async def end(self, why: str) -> None:
        """Stop the child (process group included) and release everyone waiting on it.

        Shielded: a DELETE whose client hangs up mid-way still kills the child.
        """
        if self._ending is None:
            self._ending = asyncio.create_task(self._shut(why))
        await asyncio.shield(self._ending)

    async def _shut(self, why: str) -> None:
        log.info("MCP bridge session %s ends (%s), pid %d", self.id, why, self.child.pid)
        self._on_end(self)
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        waiters = {id(w): w for w in [*self._waiting.values(), *self._streams]}
        self._waiting.clear()
        for waiter in waiters.values():
            _answer_gone(waiter)
        self.close_listener()
        await self.child.stop(EXIT_GRACE_S)

    async def _pump(self) -> None:
        """Route each line the child writes; the child's exit ends the session."""
        while (line := await self.child.readline()) != b"":
            if line is None:
                log.warning("MCP bridge session %s: a message over the size limit dropped", self.id)
                continue
            self._dispatch(line)
        await self.end("server exited")

    def _dispatch(self, line: bytes) -> None:
        message = parse_message(line)
        if message is None:
            log.debug("MCP bridge session %s: non-JSON line from the server dropped", self.id)
            return
        key = _response_key(message)
        if key is not None:
            waiter = self._waiting.pop(key, None)
            if waiter is not None:
                waiter.deliver(key, line)
            return
        # A request or notification of the server's own: the newest POST stream is most
        # likely the call it belongs to (progress, logging, sampling); else the GET stream.
        if self._streams:
            self._streams[-1].queue.put_nowait(line)
        elif self._listener is not None:
            self._listener.put_nowait(line)
        else:
            log.debug("MCP bridge session %s: server message with no stream open", self.id)

    async def _watch_idle(self) -> None:
        while True:
            due = self.last_active + self.idle_s - time.monotonic()
            if due <= 0 and not self.in_flight:
                break
            await asyncio.sleep(due if due > 0 else self.idle_s / 4)
        await self.end("idle")


class Bridges:
    """Every bridge session of the app, by id; lives across config reloads."""

    def __init__(self) -> None:
        self._sessions: dict[str, BridgeSession] = {}
        self._opening: dict[str, int] = {}
        # Sessions already ending (their child may still be exiting): shutdown waits for
        # them too, so no child process outlives the gateway's event loop.
        self._closing: set[BridgeSession] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str, route: str) -> BridgeSession | None:
        session = self._sessions.get(session_id)
        return session if session is not None and session.route == route else None

    async def open(self, spec: RouteSpec, limit: int) -> BridgeSession:
        """Start a child for a new session; SessionsFull or OSError (cannot start) otherwise."""
        assert spec.command is not None
        running = sum(1 for s in self._sessions.values() if s.route == spec.name)
        if running + self._opening.get(spec.name, 0) >= spec.max_sessions:
            raise SessionsFull
        self._opening[spec.name] = self._opening.get(spec.name, 0) + 1
        try:
            child = await Child.start(list(spec.command), limit)
        finally:
            self._opening[spec.name] -= 1
        session_id = secrets.token_hex(16)
        session = BridgeSession(session_id, spec.name, child, spec.session_idle_s, self._drop)
        self._sessions[session_id] = session
        log.info("MCP bridge session %s started, pid %d", session_id, child.pid)
        return session

    def _drop(self, session: BridgeSession) -> None:
        self._sessions.pop(session.id, None)
        self._closing.add(session)
        ending = session.ending
        if ending is not None:
            ending.add_done_callback(lambda _: self._closing.discard(session))

    def close_listeners(self) -> None:
        """Shutdown begins: end GET streams so they do not hold the drain for `grace_s`."""
        for session in self._sessions.values():
            session.close_listener()

    async def close_all(self) -> None:
        """Gateway shutdown: every child is killed, none outlives the gateway."""
        sessions = [*self._sessions.values(), *self._closing]
        await asyncio.gather(*(s.end("gateway shutdown") for s in sessions))


async def serve_bridge(
    request: web.Request, ctx: RequestContext, body: bytes, bridges: Bridges, upgrader: Upgrader
) -> web.StreamResponse:
    """Serve one Streamable HTTP request of a bridge route."""
    session_id = request.headers.get(SESSION_HEADER)
    if request.method == "POST":
        return await _post(request, ctx, body, session_id, bridges, upgrader)
    if request.method not in ("GET", "DELETE"):
        return web.Response(
            status=405, headers={"Allow": "GET, POST, DELETE", REQUEST_ID: ctx.request_id}
        )
    if not session_id:
        return _rpc_error(400, BAD_REQUEST, "Bad Request: Mcp-Session-Id header is required", ctx)
    session = bridges.get(session_id, ctx.route.spec.name)
    if session is None:
        return _rpc_error(404, SESSION_NOT_FOUND, "Session not found", ctx)
    if request.method == "DELETE":
        await session.end("deleted by the client")
        return web.Response(status=200, headers={REQUEST_ID: ctx.request_id})
    return await _listen(request, ctx, session)


async def _post(
    request: web.Request,
    ctx: RequestContext,
    body: bytes,
    session_id: str | None,
    bridges: Bridges,
    upgrader: Upgrader,
) -> web.StreamResponse:
    message = parse_message(body) if body else None
    lines = _lines(body, message)
    if lines is None or not isinstance(message, dict | list) or message == []:
        return _rpc_error(400, PARSE_ERROR, "Parse error: the body is not a JSON-RPC message", ctx)
    if session_id:
        session = bridges.get(session_id, ctx.route.spec.name)
        if session is None:
            return _rpc_error(404, SESSION_NOT_FOUND, "Session not found", ctx)
    elif not _starts_session(message):
        return _rpc_error(400, BAD_REQUEST, "Bad Request: Mcp-Session-Id header is required", ctx)
    else:
        try:
            session = await bridges.open(
                ctx.route.spec, ctx.state.loaded.config.mcp.max_message_bytes
            )
        except SessionsFull:
            response = _rpc_error(503, BAD_REQUEST, "Too many MCP sessions on this route", ctx)
            response.headers["Retry-After"] = "1"
            return response
        except OSError as exc:
            log.warning(
                "MCP bridge %s: cannot start %s: %s",
                ctx.route.spec.name,
                ctx.route.spec.command,
                exc,
            )
            return await answer_transport_failure(ctx, TransportKind.CONNECT_REFUSED)
    with session.busy():
        return await _exchange(request, ctx, session, message, lines, upgrader)


async def _exchange(
    request: web.Request,
    ctx: RequestContext,
    session: BridgeSession,
    message: Any,
    lines: bytes,
    upgrader: Upgrader,
) -> web.StreamResponse:
    outstanding = _request_ids(message)
    if not outstanding:  # notifications and responses only
        await session.send(lines)
        return web.Response(status=202, headers=_headers(session, ctx))
    stream = "text/event-stream" in request.headers.get("Accept", "").lower()
    waiter = session.expect(outstanding, stream)
    local = RequestTable(ctx.state.loaded.config.mcp.max_tracked_requests)
    for key, pending in requests_in(message):
        local.add(key, pending)
    answer = _Answer(ctx, session, waiter, Tracker(local, None), upgrader)
    try:
        await session.send(lines)
        if stream:
            return await answer.stream(request)
        return await answer.json(isinstance(message, list))
    finally:
        session.forget(waiter)


@dataclass
class _Answer:
    """Writing a POST's answer from the lines its waiter receives, responses upgraded."""

    ctx: RequestContext
    session: BridgeSession
    waiter: Waiter
    tracker: Tracker
    upgrader: Upgrader

    async def _payloads(self) -> AsyncIterator[tuple[bytes, list[tuple[str, str]]]]:
        exchange = HttpExchange(self.ctx)
        async for line in self.waiter.lines():
            payload = line.rstrip(b"\r\n")
            new, headers = await rewrite_payload(payload, self.tracker, self.upgrader, exchange)
            yield (payload if new is None else new), headers

    async def stream(self, request: web.Request) -> web.StreamResponse:
        headers = _headers(self.session, self.ctx)
        headers["Content-Type"] = "text/event-stream"
        headers["Cache-Control"] = "no-cache"
        response = web.StreamResponse(status=200, headers=headers)
        await response.prepare(request)
        async for payload, _ in self._payloads():
            await response.write(_event(payload))
        await response.write_eof()
        return response

    async def json(self, batch: bool) -> web.Response:
        headers = _headers(self.session, self.ctx)
        headers["Content-Type"] = "application/json"
        payloads: list[bytes] = []
        async for payload, advisory in self._payloads():
            payloads.append(payload)
            if advisory and not any(name in headers for name, _ in advisory):
                headers.extend(advisory)
        body = b"[" + b",".join(payloads) + b"]" if batch else payloads[0]
        return web.Response(status=200, body=body, headers=headers)


async def _listen(
    request: web.Request, ctx: RequestContext, session: BridgeSession
) -> web.StreamResponse:
    """The GET stream: the server's messages sent while no POST stream is open."""
    if "text/event-stream" not in request.headers.get("Accept", "").lower():
        return _rpc_error(
            406, BAD_REQUEST, "Not Acceptable: the client must accept text/event-stream", ctx
        )
    queue = session.listen()
    if queue is None:
        return _rpc_error(409, BAD_REQUEST, "Conflict: only one GET stream per session", ctx)
    headers = _headers(session, ctx)
    headers["Content-Type"] = "text/event-stream"
    headers["Cache-Control"] = "no-cache"
    response = web.StreamResponse(status=200, headers=headers)
    try:
        await response.prepare(request)
        while (line := await queue.get()) is not None:
            await response.write(_event(line.rstrip(b"\r\n")))
        await response.write_eof()
    finally:
        session.unlisten(queue)
    return response


def _answer_gone(waiter: Waiter) -> None:
    for key, method in list(waiter.outstanding.items()):
        waiter.deliver(key, (encode(server_gone(key[1], method)) or b"") + b"\n")


def _response_key(message: Any) -> RequestKey | None:
    if not isinstance(message, dict) or "method" in message:
        return None
    if "result" not in message and "error" not in message:
        return None
    return request_key(message.get("id"))


def _request_ids(message: Any) -> dict[RequestKey, str]:
    """Every request in the body, `initialize` included, by id: the responses to wait for."""
    found: dict[RequestKey, str] = {}
    for item in message if isinstance(message, list) else [message]:
        if isinstance(item, dict) and isinstance(item.get("method"), str):
            key = request_key(item.get("id"))
            if key is not None:
                found[key] = item["method"]
    return found


def _starts_session(message: Any) -> bool:
    items = message if isinstance(message, list) else [message]
    return any(isinstance(i, dict) and i.get("method") == "initialize" for i in items)


def _lines(body: bytes, message: Any) -> bytes | None:
    """The body as stdio lines: a batch one message a line; line breaks (JSON whitespace only,
    never inside strings) become spaces so a pretty-printed body stays one line. None when a
    batch member cannot be written back as sent (a number past float range)."""
    if isinstance(message, list):
        items = [encode(item) for item in message]
        return None if None in items else b"".join(item + b"\n" for item in items if item)
    return body.strip().replace(b"\r", b" ").replace(b"\n", b" ") + b"\n"


def _event(payload: bytes) -> bytes:
    return b"event: message\ndata: " + payload + b"\n\n"


def _headers(session: BridgeSession, ctx: RequestContext) -> CIMultiDict[str]:
    return CIMultiDict({SESSION_HEADER: session.id, REQUEST_ID: ctx.request_id})


def _rpc_error(status: int, code: int, message: str, ctx: RequestContext) -> web.Response:
    """A refusal in the shape MCP clients parse: a JSON-RPC error with no id."""
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return web.Response(
        status=status,
        body=dump(error),
        headers={"Content-Type": "application/json", REQUEST_ID: ctx.request_id},
    )
