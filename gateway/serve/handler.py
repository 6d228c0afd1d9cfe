"""The one aiohttp handler behind every route: route, dispatch by route type, count and log.

It sits above both transports: `gateway.http.forward` serves `type: http` routes and
`gateway.mcp.http_route` serves `type: mcp` routes, each with its own part of the config's
generation (gateway/serve/generation.py); neither imports the other's package. The request
observers the app declared (gateway/serve/request_observers.py) are told as it goes.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import HttpVersion11, hdrs, web

from gateway.exchange.context import RequestContext, request_id_of
from gateway.exchange.own_answers import path_refusal, refuse, refuse_unrouted
from gateway.exchange.relay import send_continue
from gateway.failure import Refusal
from gateway.http.forward import forward, request_target
from gateway.mcp.http_route import handle_mcp
from gateway.serve.generation import STATE, Generation
from gateway.serve.request_observers import REQUEST_OBSERVERS, RequestObserver
from gateway.telemetry.logs import AccessRecord
from gateway.telemetry.metrics import IN_FLIGHT, count_request

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
    routes = request.app[STATE].current.exchange.routes
    route, forwarded = routes.resolve(request_target(request))
    if route is not None and route.spec.type == "mcp" and forwarded is not None:
        await send_continue(request)


async def handle(request: web.Request) -> web.StreamResponse:
    """Forward, then count and log the outcome, whatever it was."""
    generation = request.app[STATE].current
    observers = request.app[REQUEST_OBSERVERS]
    request_id = request_id_of(request)
    target = request_target(request)
    record = AccessRecord(request_id, request.method, request.path, time.monotonic())
    for observer in observers:
        observer.began(request, record)
    IN_FLIGHT.inc()
    try:
        response = await dispatch(request, generation, record, target, observers)
        record.status = response.status
        return response
    except asyncio.CancelledError:
        record.status = CLIENT_CLOSED
        raise
    finally:
        IN_FLIGHT.dec()
        count_request(record.route, record.method, record.status)
        for observer in observers:
            observer.ended(record)
        record.emit()


async def dispatch(
    request: web.Request,
    generation: Generation,
    record: AccessRecord,
    target: str,
    observers: tuple[RequestObserver, ...],
) -> web.StreamResponse:
    """The route for the target and the data path for its type."""
    state = generation.exchange
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
        return await handle_mcp(request, ctx, target, generation.mcp)
    settles = [settle for o in observers if (settle := o.routed(ctx, target)) is not None]
    response = await forward(request, ctx, target, generation.http)
    for settle in settles:
        settle(response.status)
    return response
