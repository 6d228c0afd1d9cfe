"""The one aiohttp handler behind every route: route, dispatch by route type, count and log.

It sits above both data paths: `proxy.forward` serves `type: http` routes and
`mcp.http_route` serves `type: mcp` routes; neither imports the other's package.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import HttpVersion11, hdrs, web

from gateway.exchange.context import RequestContext, request_id_of
from gateway.exchange.own_answers import path_refusal, refuse, refuse_unrouted
from gateway.exchange.relay import send_continue
from gateway.exchange.state import STATE, GatewayState
from gateway.failure import Refusal
from gateway.http.followup_watch import FOLLOWUP_BOOK, Watch
from gateway.http.forward import forward, request_target
from gateway.mcp.http_route import handle_mcp
from gateway.telemetry.logs import AccessRecord
from gateway.telemetry.metrics import IN_FLIGHT, count_request
from gateway.telemetry.tracing import TRACING

CLIENT_CLOSED = 499  # nginx's convention for "the client went away first"
CONTINUE = "100-continue"


async def expect(request: web.Request) -> None:
    """`Expect: 100-continue`: on an HTTP route the upstream decides (forward passes its
    100 Continue on, or its refusal before any byte of the body is sent); a request the gateway
    answers itself (no route, over the body limit) is refused without the upload as well.
    MCP routes read the body themselves, so they get aiohttp's own immediate 100."""
    if request.version < HttpVersion11:
        return  # HTTP/1.0 knows no expectations
    value = request.headers.get(hdrs.EXPECT, "")
    if value.lower() != CONTINUE:
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {value}")
    route, forwarded = request.app[STATE].current.routes.resolve(request_target(request))
    if route is not None and route.spec.type == "mcp" and forwarded is not None:
        await send_continue(request)


async def handle(request: web.Request) -> web.StreamResponse:
    """Forward, then count and log the outcome, whatever it was."""
    state = request.app[STATE].current
    request_id = request_id_of(request)
    target = request_target(request)
    record = AccessRecord(request_id, request.method, request.path, time.monotonic())
    if TRACING.on:
        record.trace = TRACING.begin(request)
    IN_FLIGHT.inc()
    try:
        response = await dispatch(request, state, record, target)
        record.status = response.status
        return response
    except asyncio.CancelledError:
        record.status = CLIENT_CLOSED
        raise
    finally:
        IN_FLIGHT.dec()
        count_request(record.route, record.method, record.status)
        if record.trace is not None:
            record.trace.end(record)
        record.emit()


async def dispatch(
    request: web.Request, state: GatewayState, record: AccessRecord, target: str
) -> web.StreamResponse:
    """The route for the target and the data path for its type."""
    refusal = path_refusal(target.partition("?")[0], request.path)
    if refusal is not None:
        return await refuse_unrouted(request, state, record, refusal)
    route, forwarded = state.routes.resolve(target)
    if route is None:
        refusal = Refusal.NO_ROUTE if forwarded is not None else Refusal.UNSAFE_PATH
        return await refuse_unrouted(request, state, record, refusal)
    record.route = route.spec.name
    ctx = RequestContext(request, state, route, record)
    if forwarded is None:  # the path leaves its route in some reading (docs/transparency.md#paths)
        return await refuse(ctx, Refusal.UNSAFE_PATH)
    target = forwarded
    declared = request.content_length
    if declared is not None and declared > state.config.limits.max_request_body_bytes:
        return await refuse(ctx, Refusal.BODY_TOO_LARGE)
    if route.spec.type == "mcp":
        return await handle_mcp(request, ctx, target)
    book = request.app[FOLLOWUP_BOOK]
    if not book.enabled:
        return await forward(request, ctx, target)
    watch = Watch.begin(book, ctx, target)
    response = await forward(request, ctx, target)
    watch.end(response.status)
    return response
