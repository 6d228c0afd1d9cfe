"""The request handler: route, forward once, then stream a success or enrich a failure.

Data path, top to bottom: request in → route → forward (exactly one upstream request) →
success: stream status, headers and body back untouched → failure: `failure_path` reads the
error body within the cap, classifies, resolves and renders for the mode, failing open to the
original bytes. Transport faults become synthesised 502/504 failures.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time

from aiohttp import web
from multidict import CIMultiDict

from gateway.failure import TransportKind
from gateway.logs import AccessRecord
from gateway.mcp.http_route import handle_mcp
from gateway.observe import IN_FLIGHT, count_request, observe_upstream
from gateway.proxy.body import BodyStalled, BodyTooLarge, RequestBody
from gateway.proxy.client import ResponseDeadline
from gateway.proxy.failure_path import (
    Context,
    answer_transport_failure,
    answer_upstream_failure,
)
from gateway.proxy.headers import (
    client_response_headers,
    upstream_request_headers,
    visible_ascii,
)
from gateway.proxy.relay import relay
from gateway.proxy.state import STATE, UPSTREAM, GatewayState
from gateway.proxy.upstream import UPSTREAM_ERRORS, transport_kind

log = logging.getLogger("mendpoint.proxy")

REQUEST_ID = "X-Request-Id"
CLIENT_CLOSED = 499  # nginx's convention for "the client went away first"


async def handle(request: web.Request) -> web.StreamResponse:
    """The single handler behind every route: forward, then count and log the outcome."""
    state = request.app[STATE].current
    request_id = request_id_of(request)
    target = request_target(request)
    record = AccessRecord(request_id, request.method, request.path, time.monotonic())
    IN_FLIGHT.inc()
    try:
        response = await forward(request, state, record, target)
        record.status = response.status
        return response
    except asyncio.CancelledError:
        record.status = CLIENT_CLOSED
        raise
    finally:
        IN_FLIGHT.dec()
        count_request(record.route, record.method, record.status)
        record.emit()


async def forward(
    request: web.Request, state: GatewayState, record: AccessRecord, target: str
) -> web.StreamResponse:
    """Exactly one upstream request; its answer streamed back or handed to the failure path."""
    request_id = record.request_id
    route = state.routes.find(target.partition("?")[0])
    if route is None:
        return plain(404, "No route for this path", request_id)
    record.route = route.spec.name
    limits = state.loaded.config.limits
    declared = request.content_length
    if declared is not None and declared > limits.max_request_body_bytes:
        return plain(413, "Request body too large", request_id)
    if route.spec.type == "mcp":
        return await handle_mcp(request, Context(request, state, route, record), target)
    client = request.app[UPSTREAM]
    deadline = ResponseDeadline(limits.response_timeout_s, client.loop)
    body = None
    if request.body_exists:
        body = RequestBody(
            request.content,
            limits.max_request_body_bytes,
            limits.request_body_timeout_s,
            on_end=deadline.start,
        )
    else:
        deadline.start()
    ctx = Context(request=request, state=state, route=route, record=record, deadline=deadline)
    headers = upstream_request_headers(
        request.headers,
        peer=request.remote,
        scheme=request.scheme,
        upstream_host=route.upstream_host,
        preserve_host=route.spec.preserve_host,
        request_id=request_id,
    )
    sent = time.monotonic()
    try:
        upstream = await client.request(
            request.method,
            route.origin,
            route.upstream_target(target),
            headers,
            body.chunks() if body is not None else None,
            deadline,
        )
    except UPSTREAM_ERRORS as exc:
        if body is not None and body.failure is not None:
            return _body_failure(body.failure, request_id)
        return await answer_transport_failure(ctx, transport_kind(exc))
    if upstream.status < 200:
        # Upgrade is hop-by-hop, so the gateway never asks for one: a 101 (or any 1xx as the
        # final answer) would switch the client's connection to a protocol nobody negotiated.
        upstream.close()
        return await answer_transport_failure(ctx, TransportKind.INVALID_RESPONSE)
    record.upstream_ms = (time.monotonic() - sent) * 1000
    record.upstream_status = upstream.status
    observe_upstream(record.route, record.upstream_ms / 1000)
    try:
        if upstream.status < 400 and not state.classifier.has_rules_for(upstream.status):
            headers = client_response_headers(upstream.headers)
            headers[REQUEST_ID] = request_id
            return await relay(request, upstream, headers)
        return await answer_upstream_failure(ctx, upstream)
    finally:
        upstream.release()


def request_target(request: web.Request) -> str:
    """The origin-form target exactly as sent; absolute-form is reduced to its path and query."""
    raw = request.raw_path
    if raw.startswith("/"):
        return raw
    return request.rel_url.raw_path_qs or "/"


def request_id_of(request: web.Request) -> str:
    """The caller's `X-Request-Id` when it is a sane token, else a fresh one."""
    value = request.headers.get(REQUEST_ID)
    if value and len(value) <= 200 and visible_ascii(value):
        return value
    return _REQUEST_IDS.fresh()


class _RequestIds:
    """32 hex digits, unique without a syscall: a random per-process prefix and a counter.

    Unique is what a request id needs (it is logged and echoed, never trusted); `uuid4()` or
    `os.urandom` cost a syscall per request on the success path.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count(int.from_bytes(os.urandom(4), "big"))

    def fresh(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


_REQUEST_IDS = _RequestIds()
os.register_at_fork(after_in_child=_REQUEST_IDS.reset)  # a forked worker never repeats ids


def plain(status: int, text: str, request_id: str) -> web.Response:
    return web.Response(
        status=status,
        text=text + "\n",
        headers=CIMultiDict({REQUEST_ID: request_id}),
    )


def _body_failure(failure: BodyTooLarge | BodyStalled, request_id: str) -> web.Response:
    if isinstance(failure, BodyTooLarge):
        response = plain(413, "Request body too large", request_id)
    else:
        response = plain(408, "Request body not received in time", request_id)
    response.force_close()
    return response
