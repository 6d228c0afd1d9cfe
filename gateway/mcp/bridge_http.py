"""The bridge's HTTP side: a stdio MCP server served over Streamable HTTP.

This is how a team exposes a local tool server to remote agents with upgraded errors. An
`initialize` POST without `Mcp-Session-Id` opens a bridge session (`bridge_sessions`: one child
process each) and the answer names it; later requests are routed by that id; DELETE ends it.
A session belongs to the caller that opened it (`bridge_holders`): anyone else's POST, GET or
DELETE with its id gets the same 404 as an unknown id, and a caller past its share
(`max_sessions_per_caller`, `max_sessions_per_address`) gets 429
(docs/mcp.md#sessions-belong-to-their-caller).

A POST's requests are written to the child as lines (batches one message a line, since stdio
servers read single messages); the POST then waits for the responses with those ids. A single
request whose answer is the first thing the server sends is answered as one `application/json`
body (no SSE event size cap applies); when the server sends its own requests and notifications
while the call runs (progress, logging, sampling) and the client accepts `text/event-stream`,
the answer becomes a stream carrying them and then the response; a client that accepts only
JSON gets one body. Which stream a server message takes is `bridge_streams`' rule.
Responses are upgraded like on every other transport (`rewrite_payload`, under the POST's own
mode and caller); every other message is the server's line byte for byte. Not supported:
resuming a stream (`Last-Event-ID`; the child keeps no event log) and the stateless
2026-07-28 revision (a stdio server needs its `initialize`, so requests without a session are
refused with 400).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from gateway.exchange.context import RequestContext
from gateway.exchange.own_answers import answer_transport_failure
from gateway.failure import Refusal, TransportKind
from gateway.header_names import MCP_SESSION_ID, REQUEST_ID
from gateway.mcp.bridge_holders import Holder, holder_of
from gateway.mcp.bridge_sessions import Bridges, BridgeSession, HolderSessionsFull, SessionsFull
from gateway.mcp.bridge_streams import Line, Waiter
from gateway.mcp.call_site import HttpCallSite
from gateway.mcp.correlation import Tracker, rewrite_payload
from gateway.mcp.jsonrpc import (
    RequestKey,
    RequestTable,
    encode,
    request_key,
    requests_in,
)
from gateway.mcp.request_body import Read
from gateway.mcp.rpc_errors import PARSE_ERROR, SERVER_ERROR, rpc_refusal
from gateway.mcp.upgrade import Upgrader

log = logging.getLogger("mendpoint.mcp")


async def serve_bridge(
    request: web.Request,
    ctx: RequestContext,
    read: Read,
    sent: bytes,
    bridges: Bridges,
    upgrader: Upgrader,
) -> web.StreamResponse:
    """Serve one Streamable HTTP request of a bridge route: `read` is its JSON-RPC text (the
    child reads it) and the message parsed from it within bounds
    (gateway/mcp/request_body.py), `sent` the bytes as the client sent them (a sibling worker
    gets those)."""
    session_id = request.headers.get(MCP_SESSION_ID)
    if request.method == "POST":
        return await _post(request, ctx, read, sent, session_id, bridges, upgrader)
    if request.method not in ("GET", "DELETE"):
        return web.Response(
            status=405, headers={"Allow": "GET, POST, DELETE", REQUEST_ID: ctx.request_id}
        )
    if not session_id:
        return rpc_refusal(
            400, SERVER_ERROR, "Bad Request: Mcp-Session-Id header is required", ctx.request_id
        )
    session = bridges.get(session_id, ctx.route.spec.name, _holder(ctx))
    if session is None:
        return await _elsewhere(request, ctx, sent, session_id, bridges)
    if request.method == "DELETE":
        await session.end("deleted by the client")
        return web.Response(status=200, headers={REQUEST_ID: ctx.request_id})
    return await _listen(request, ctx, session)


async def _post(
    request: web.Request,
    ctx: RequestContext,
    read: Read,
    sent: bytes,
    session_id: str | None,
    bridges: Bridges,
    upgrader: Upgrader,
) -> web.StreamResponse:
    message = read.message
    lines = _lines(read.body, message)
    if lines is None or not isinstance(message, dict | list) or message == []:
        return rpc_refusal(
            400, PARSE_ERROR, "Parse error: the body is not a JSON-RPC message", ctx.request_id
        )
    if session_id:
        session = bridges.get(session_id, ctx.route.spec.name, _holder(ctx))
        if session is None:
            return await _elsewhere(request, ctx, sent, session_id, bridges)
    elif not _starts_session(message):
        return rpc_refusal(
            400, SERVER_ERROR, "Bad Request: Mcp-Session-Id header is required", ctx.request_id
        )
    else:
        try:
            session = await bridges.open(
                ctx.route.spec, ctx.state.config.mcp.max_message_bytes, _holder(ctx)
            )
        except HolderSessionsFull as full:
            return _holder_full(ctx, full)
        except SessionsFull:
            response = rpc_refusal(
                503, SERVER_ERROR, "Too many MCP sessions on this route", ctx.request_id
            )
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


async def _elsewhere(
    request: web.Request, ctx: RequestContext, sent: bytes, session_id: str, bridges: Bridges
) -> web.StreamResponse:
    """A session this process does not hold: the process that does answers (a sibling
    worker, or another replica with `fleet.sessions`), else 404. It gets the request as it
    came, so it reads the body exactly as this process did."""
    return await bridges.owners.answer(
        request, sent, session_id, ctx.request_id, ctx.peer, ctx.from_replica
    )


def _holder(ctx: RequestContext) -> Holder:
    return holder_of(ctx.caller, ctx.client_address)


def _holder_full(ctx: RequestContext, full: HolderSessionsFull) -> web.Response:
    """429, not the route's 503: this caller holds its share, and what frees one is its own
    DELETE (or the idle reaper, by `Retry-After`), not waiting for others."""
    limit, setting = full.limit, full.setting
    response = rpc_refusal(
        429,
        SERVER_ERROR,
        f"Too many MCP sessions for this caller on this route ({setting}: "
        f"{limit}): end one with DELETE, or wait until one has been idle for session_idle_s",
        ctx.request_id,
        {setting: limit},
    )
    response.headers["Retry-After"] = str(max(1, math.ceil(full.retry_after_s)))
    return response


async def _exchange(
    request: web.Request,
    ctx: RequestContext,
    session: BridgeSession,
    message: Any,
    lines: bytes,
    upgrader: Upgrader,
) -> web.StreamResponse:
    outstanding = _request_ids(message)
    session.note(message)
    if not outstanding:  # notifications and responses only
        await session.send(lines)
        return web.Response(status=202, headers=_headers(session, ctx))
    stream = "text/event-stream" in request.headers.get("Accept", "").lower()
    waiter = session.expect(outstanding, stream, message)
    local = RequestTable(ctx.state.config.mcp.max_tracked_requests)
    for key, pending in requests_in(message):
        local.add(key, pending)
    answer = _Answer(ctx, session, waiter, Tracker(local, None), upgrader)
    command = ctx.route.spec.command
    if ctx.record.trace is not None and command:
        ctx.record.trace.to_child(command[0])
    try:
        await session.send(lines)
        if stream:
            return await answer.stream(request, isinstance(message, list))
        return await answer.json(request, isinstance(message, list))
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
        site = HttpCallSite(self.ctx)
        async for line in self.waiter.lines():
            payload = line.raw.rstrip(b"\r\n")
            if line.refusal is not None:
                new, headers = await self._own(line, line.refusal, site)
            else:
                new, headers = await rewrite_payload(
                    payload, self.tracker, self.upgrader, site, line.message
                )
            yield (payload if new is None else new), headers

    async def _own(
        self, line: Line, refusal: Refusal, site: HttpCallSite
    ) -> tuple[bytes | None, list[tuple[str, str]]]:
        """The gateway's own answer, upgraded as its built-in rule says (the same as
        `mendpoint stdio`'s, docs/mcp.md#a-server-that-exits)."""
        pending = self.tracker.pop(line.message)
        if pending is None:  # `initialize`: never upgraded
            return None, []
        outcome = await self.upgrader.own_error(line.message, pending, site, refusal)
        if outcome is None:
            return None, []
        return (None if outcome.message is None else encode(outcome.message)), outcome.headers

    async def stream(self, request: web.Request, batch: bool) -> web.StreamResponse:
        """An event stream, unless the first thing to send is the one answer of a single
        request: then one JSON body, which every revision allows and no client caps at an
        SSE event size (the Python SDK refuses events over 1 MiB). Server messages sent
        while the call runs (progress, logging, sampling) open the stream instead."""
        payloads = self._payloads()
        first = await anext(payloads, None)
        if first is None:
            return self._nothing(request)
        if not batch and self.waiter.answered():
            return self._json_body([first], batch)
        headers = _headers(self.session, self.ctx)
        headers["Content-Type"] = "text/event-stream"
        headers["Cache-Control"] = "no-cache"
        response = web.StreamResponse(status=200, headers=headers)
        await response.prepare(request)
        await response.write(_event(first[0]))
        async for payload, _ in payloads:
            await response.write(_event(payload))
        await response.write_eof()
        return response

    async def json(self, request: web.Request, batch: bool) -> web.StreamResponse:
        items = [item async for item in self._payloads()]
        return self._json_body(items, batch) if items else self._nothing(request)

    def _nothing(self, request: web.Request) -> web.StreamResponse:
        """No message for this POST: its requests were cancelled and the session is over.
        The gateway makes up no answer (docs/mcp.md#cancelled-requests): an event stream
        that ends empty, as a direct server's POST stream does, or 202 for a client that
        reads JSON only."""
        headers = _headers(self.session, self.ctx)
        if "text/event-stream" not in request.headers.get("Accept", "").lower():
            return web.Response(status=202, headers=headers)
        headers["Content-Type"] = "text/event-stream"
        headers["Cache-Control"] = "no-cache"
        return web.Response(status=200, headers=headers)

    def _json_body(
        self, items: list[tuple[bytes, list[tuple[str, str]]]], batch: bool
    ) -> web.Response:
        headers = _headers(self.session, self.ctx)
        headers["Content-Type"] = "application/json"
        for _, advisory in items:
            if advisory and not any(name in headers for name, _ in advisory):
                headers.extend(advisory)
        payloads = [payload for payload, _ in items]
        body = b"[" + b",".join(payloads) + b"]" if batch or not payloads else payloads[0]
        return web.Response(status=200, body=body, headers=headers)


async def _listen(
    request: web.Request, ctx: RequestContext, session: BridgeSession
) -> web.StreamResponse:
    """The GET stream: the server's messages sent while no POST stream is open."""
    if "text/event-stream" not in request.headers.get("Accept", "").lower():
        return rpc_refusal(
            406,
            SERVER_ERROR,
            "Not Acceptable: the client must accept text/event-stream",
            ctx.request_id,
        )
    lines = session.listen()
    if lines is None:
        return rpc_refusal(
            409, SERVER_ERROR, "Conflict: only one GET stream per session", ctx.request_id
        )
    headers = _headers(session, ctx)
    headers["Content-Type"] = "text/event-stream"
    headers["Cache-Control"] = "no-cache"
    response = web.StreamResponse(status=200, headers=headers)
    try:
        await response.prepare(request)
        async for line in lines:
            await response.write(_event(line.rstrip(b"\r\n")))
        await response.write_eof()
    finally:
        await lines.aclose()
    return response


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
    return CIMultiDict({MCP_SESSION_ID: session.id, REQUEST_ID: ctx.request_id})


__all__ = ["serve_bridge"]
