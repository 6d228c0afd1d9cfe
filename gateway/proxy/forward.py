"""The HTTP data path of a `type: http` route: forward once, stream a success, enrich a failure.

Request in (routed by `gateway.handler`) → forward (exactly one upstream request) → success:
stream status, headers and body back untouched → failure: `failure_path` reads the error body
within the cap, classifies, resolves and renders for the mode, failing open to the original
bytes. Transport faults become synthesised 502/504 failures.
"""

from __future__ import annotations

import functools
import logging
import time

from aiohttp import web
from multidict import CIMultiDict

from gateway.failure import TransportKind
from gateway.header_names import REQUEST_ID
from gateway.observe import observe_upstream
from gateway.proxy.body import BodyStalled, BodyTooLarge, RequestBody
from gateway.proxy.client import ResponseDeadline
from gateway.proxy.context import RequestContext, echo_request_id
from gateway.proxy.failure_path import (
    answer_transport_failure,
    answer_upstream_failure,
)
from gateway.proxy.headers import (
    client_response_headers,
    upstream_request_headers,
)
from gateway.proxy.relay import relay, relay_interim
from gateway.proxy.state import UPSTREAM
from gateway.proxy.upstream import UPSTREAM_ERRORS, transport_kind

log = logging.getLogger("mendpoint.proxy")


async def forward(request: web.Request, ctx: RequestContext, target: str) -> web.StreamResponse:
    """Exactly one upstream request; its answer streamed back or handed to the failure path."""
    state, route, record = ctx.state, ctx.route, ctx.record
    request_id = record.request_id
    limits = state.loaded.config.limits
    client = request.app[UPSTREAM]
    deadline = ResponseDeadline(limits.response_timeout_s, client.loop)
    body = None
    if request.body_exists:
        body = RequestBody(
            request.content,
            limits.max_request_body_bytes,
            limits.request_body_timeout_s,
            on_end=deadline.start,
            digest=ctx.body_hasher,
            keep_bytes=_replay_bytes(request, limits.replay_body_bytes),
        )
    else:
        deadline.start()
    ctx.deadline = deadline
    headers = upstream_request_headers(
        request.headers,
        peer=request.remote,
        scheme=request.scheme,
        upstream_host=route.upstream_host,
        preserve_host=route.spec.preserve_host,
        request_id=request_id,
        trusted=ctx.from_trusted_proxy,
    )
    sent = time.monotonic()
    try:
        upstream = await client.request(
            request.method,
            route.origin,
            route.upstream_target(target),
            headers,
            body,
            deadline,
            idempotent=request.method in route.idempotent,
            interim=functools.partial(relay_interim, request),
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
            echo_request_id(headers, record)
            response = await relay(request, upstream, headers)
        else:
            response = await answer_upstream_failure(ctx, upstream)
    finally:
        upstream.release()
    if body is not None and body.untouched:
        # The upstream answered without wanting the body (Expect: 100-continue refused): the
        # client still holds it, so this connection cannot carry another request.
        response.force_close()
    return response


def _replay_bytes(request: web.Request, cap: int) -> int:
    """Keep a body for a possible replay only when it is declared small: a chunked or large
    body is streamed once and never replayed."""
    declared = request.content_length
    return cap if declared is not None and declared <= cap else 0


def request_target(request: web.Request) -> str:
    """The origin-form target exactly as sent; absolute-form is reduced to its path and query."""
    raw = request.raw_path
    if raw.startswith("/"):
        return raw
    return request.rel_url.raw_path_qs or "/"


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
