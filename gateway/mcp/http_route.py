"""The Streamable HTTP handler of a `type: mcp` route (both 2025-11-25 and 2026-07-28).

POST, GET and DELETE go to the upstream exactly once, through the same call as HTTP routes
(`gateway.exchange.upstream.call.call_upstream`: `limits.response_timeout_s`, forwarding
headers, transport faults as 502/504), with every header the proxy forwards (`Mcp-Session-Id`,
`MCP-Protocol-Version`, `Last-Event-ID`, `Mcp-Method`, `Mcp-Name`, every `Mcp-Param-*`).
Requests in a POST body are registered in the session's table before sending, so their responses
can be upgraded wherever they arrive. The gateway reads them from a copy of the body with its
content codings undone (gzip, deflate; the decoded size under `limits.max_request_body_bytes`,
else 413; another coding, 415) and forwards the bytes as the client sent them. Status codes,
`Content-Type`, 202s, non-JSON bodies and HTTP errors pass exactly as the upstream sent them;
`application/json` bodies are read (up to `mcp.max_message_bytes`) only when a tracked response
may be in them, and `text/event-stream` bodies are relayed event by event."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import StreamReader, hdrs, web
from multidict import CIMultiDict

from gateway.config.models import LimitsSpec
from gateway.exchange.context import RequestContext
from gateway.exchange.headers import client_response_headers, visible_ascii
from gateway.exchange.own_answers import answer_transport_failure, refuse
from gateway.exchange.relay import relay
from gateway.exchange.rewritten_headers import drop_body_bound
from gateway.exchange.upstream.call import call_upstream
from gateway.exchange.upstream.round_trip import UpstreamResponse
from gateway.failure import Refusal, TransportKind
from gateway.fence.aiohttp_private import RelayResponse
from gateway.header_names import MCP_PROTOCOL_VERSION, MCP_SESSION_ID, REQUEST_ID
from gateway.mcp import cors, oauth
from gateway.mcp.bridge_http import serve_bridge
from gateway.mcp.call_site import HttpCallSite
from gateway.mcp.correlation import Tracker, rewrite_payload
from gateway.mcp.jsonrpc import (
    RequestTable,
    requests_in,
)
from gateway.mcp.origin import refusal
from gateway.mcp.request_body import Read
from gateway.mcp.rpc_errors import SERVER_ERROR, rpc_refusal
from gateway.mcp.sessions_state import MCP_RUNTIME
from gateway.mcp.sse import relay_events
from gateway.mcp.upgrade import Upgrader
from gateway.text.capped_read import read_capped

log = logging.getLogger("mendpoint.mcp")


async def handle_mcp(
    request: web.Request, ctx: RequestContext, target: str, upgrader: Upgrader
) -> web.StreamResponse:
    """Serve one Streamable HTTP request of an MCP route (an upstream URL, or the bridge),
    upgrading failures with this config's `upgrader`."""
    spec = ctx.route.spec
    origin = request.headers.get("Origin")
    why = refusal(origin, request.headers.get("Host"), spec)
    if why is not None:
        return _forbidden(why, ctx.request_id)
    if origin is not None:  # a browser, on an origin this route lets in
        if cors.is_preflight(request):
            return cors.preflight(request, origin, ctx.request_id)
        cors.allow(request, origin)
    if not _session_id_valid(request.headers.getall(MCP_SESSION_ID, [])):
        return _bad_session_id(ctx.request_id)
    runtime = request.app[MCP_RUNTIME]
    limits = ctx.state.config.limits
    sent = b""  # the body as the client sent it
    read = Read(b"")  # its JSON-RPC text, codings undone, and the message it holds
    post = request.method == "POST"
    if request.body_exists:
        try:
            sent, whole = await _read_body(request.content, limits)
        except TimeoutError:
            return await refuse(ctx, Refusal.BODY_TIMEOUT)
        if not whole:
            return await refuse(ctx, Refusal.BODY_TOO_LARGE)
        coding = ",".join(request.headers.getall(hdrs.CONTENT_ENCODING, ()))
        mcp_limits = ctx.state.config.mcp
        bounded = await runtime.bodies.read(
            sent, coding, post, limits.max_request_body_bytes, mcp_limits
        )
        if isinstance(bounded, Refusal):
            return await refuse(ctx, bounded)
        read = bounded
    posted = post and bool(read.body)
    message = read.message
    if ctx.record.trace is not None:
        _traced(request, ctx, message)
    if spec.command is not None:
        return await serve_bridge(request, ctx, read, sent, runtime.bridges, upgrader)
    session_id = request.headers.get(MCP_SESSION_ID)
    settings = ctx.state.config.mcp
    local = RequestTable(settings.max_tracked_requests)
    shared = (
        runtime.sessions.table(session_id) if session_id and request.method != "DELETE" else None
    )
    if posted:
        for key, pending in requests_in(message):
            local.add(key, pending)
            if shared is not None:
                shared.add(key, pending)
    elif request.method != "GET":
        shared = None  # only a GET stream can carry responses to earlier POSTs
    # The bytes as sent, with their own Content-Encoding: never the copy decoded above.
    upstream = await call_upstream(ctx, target, sent if request.body_exists else None)
    if isinstance(upstream, Refusal):
        return await refuse(ctx, upstream)
    if isinstance(upstream, TransportKind):
        return await answer_transport_failure(ctx, upstream)
    try:
        if request.method == "DELETE" and upstream.status < 300 and session_id:
            runtime.sessions.drop(session_id)
        tracker = Tracker(local, shared)
        return await _respond(request, ctx, upstream, tracker, upgrader)
    finally:
        upstream.release()


async def _respond(
    request: web.Request,
    ctx: RequestContext,
    upstream: UpstreamResponse,
    tracker: Tracker,
    upgrader: Upgrader,
) -> web.StreamResponse:
    headers = client_response_headers(upstream.headers)
    headers[REQUEST_ID] = ctx.request_id
    media = upstream.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctx.route.spec.public_url is not None:
        oauth.rewrite_challenge(headers, ctx.route)
        if (
            upstream.status == 200
            and media == "application/json"
            and oauth.is_metadata_request(request.method, request.path)
        ):
            return await _answer_metadata(request, ctx, upstream, headers)
    if upstream.status != 200 or not tracker or request.method == "HEAD":
        return await relay(request, upstream, headers)
    if media == "text/event-stream":
        return await _relay_stream(request, ctx, upstream, headers, tracker, upgrader)
    if media == "application/json" and "Content-Encoding" not in upstream.headers:
        return await _answer_json(request, ctx, upstream, headers, tracker, upgrader)
    return await relay(request, upstream, headers)


async def _answer_json(
    request: web.Request,
    ctx: RequestContext,
    upstream: UpstreamResponse,
    headers: CIMultiDict[str],
    tracker: Tracker,
    upgrader: Upgrader,
) -> web.StreamResponse:
    cap = ctx.state.config.mcp.max_message_bytes
    read = await upstream.read_capped(cap)
    if isinstance(read, TransportKind):
        return await answer_transport_failure(ctx, read)
    raw, whole = read.data, read.whole
    if not whole:
        return await relay(request, upstream, headers, raw)
    new, extra = await rewrite_payload(raw, tracker, upgrader, HttpCallSite(ctx))
    headers.extend(extra)
    if new is None:
        return await relay(request, upstream, headers, raw, complete=True)
    drop_body_bound(headers, upstream.status)
    return web.Response(status=upstream.status, reason=upstream.reason, body=new, headers=headers)


async def _answer_metadata(
    request: web.Request,
    ctx: RequestContext,
    upstream: UpstreamResponse,
    headers: CIMultiDict[str],
) -> web.StreamResponse:
    """Protected-resource metadata with its `resource` made public (`mcp/oauth.py`)."""
    read = await upstream.read_capped(oauth.MAX_METADATA_BYTES)
    if isinstance(read, TransportKind):
        return await answer_transport_failure(ctx, read)
    raw, whole = read.data, read.whole
    new = oauth.rewrite_metadata(raw, ctx.route) if whole else None
    if new is None:
        return await relay(request, upstream, headers, raw, complete=whole)
    drop_body_bound(headers, upstream.status)
    return web.Response(status=upstream.status, reason=upstream.reason, body=new, headers=headers)


async def _relay_stream(
    request: web.Request,
    ctx: RequestContext,
    upstream: UpstreamResponse,
    headers: CIMultiDict[str],
    tracker: Tracker,
    upgrader: Upgrader,
) -> web.StreamResponse:
    response = RelayResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    await response.prepare(request)
    site = HttpCallSite(ctx)

    async def rewrite(data: bytes) -> bytes | None:
        new, _ = await rewrite_payload(data, tracker, upgrader, site)
        return new

    try:
        await relay_events(
            upstream.chunks(), response.write, rewrite, ctx.state.config.mcp.max_message_bytes
        )
    except ConnectionError:  # the client left: no one's failure, as for any answer
        if request.transport is not None:
            request.transport.abort()
        return response
    if upstream.fault is not None:
        log.info("MCP event stream from upstream ended early (%s)", upstream.fault.value)
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


async def _read_body(content: StreamReader, limits: LimitsSpec) -> tuple[bytes, bool]:
    """The request body, bounded; `request_body_timeout_s` for one still on its way.

    A tool call's body usually arrives with its head: then it is all buffered and ended,
    reading it cannot wait, and no timer is armed for it.
    """
    if content.is_eof():
        return await read_capped(content, limits.max_request_body_bytes)
    async with asyncio.timeout(limits.request_body_timeout_s):
        return await read_capped(content, limits.max_request_body_bytes)


def _traced(request: web.Request, ctx: RequestContext, message: object) -> None:
    """The MCP side of the exchange's span (docs/operations.md#traces)."""
    assert ctx.record.trace is not None
    headers = request.headers
    session, version = headers.get(MCP_SESSION_ID), headers.get(MCP_PROTOCOL_VERSION)
    ctx.record.trace.mcp_request(message, session, version)


def _session_id_valid(values: list[str]) -> bool:
    """At most one `Mcp-Session-Id`, of visible ASCII only (0x21-0x7E, MCP transport spec)."""
    return len(values) <= 1 and all(visible_ascii(value) for value in values)


def _bad_session_id(request_id: str) -> web.Response:
    """400 before anything reaches the server, as a JSON-RPC error with no id."""
    message = "Bad Request: Mcp-Session-Id must be one value of visible ASCII characters"
    return rpc_refusal(400, SERVER_ERROR, message, request_id)


__all__ = ["handle_mcp"]


def _forbidden(why: str, request_id: str) -> web.Response:
    """A plain 403 for a browser origin or host the route does not let in (docs/mcp.md)."""
    return web.Response(status=403, text=why + "\n", headers=CIMultiDict({REQUEST_ID: request_id}))
