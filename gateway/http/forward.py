"""The HTTP data path of a `type: http` route: forward once, stream a success, enrich a failure.

Request in (routed by `gateway.serve.handler`) → forward (exactly one upstream request, through
`gateway.exchange.upstream.call.call_upstream`, which MCP routes share) → success:
stream status, headers and body back untouched → failure: `failure_path` reads the error body
within the cap, classifies, resolves and renders for the mode, failing open to the original
bytes. Transport faults become synthesised 502/504 failures. A WebSocket handshake the
upstream accepts (101) becomes a tunnel (`gateway.http.tunnel`).
"""

from __future__ import annotations

import functools
import logging

from aiohttp import web

from gateway.exchange.body import BodyStalled, BodyTooLarge, RequestBody
from gateway.exchange.context import RequestContext, echo_request_id
from gateway.exchange.headers import client_response_headers
from gateway.exchange.own_answers import answer_transport_failure, refuse
from gateway.exchange.relay import relay, relay_interim
from gateway.exchange.upstream.call import call_upstream
from gateway.failure import Refusal, TransportKind
from gateway.http.cached_answers import CachedAnswers
from gateway.http.failure_path import answer_upstream_failure
from gateway.http.tunnel import WEBSOCKET, tunnel, websocket_upgrade

log = logging.getLogger("mendpoint.proxy")


async def forward(
    request: web.Request, ctx: RequestContext, target: str, answers: CachedAnswers
) -> web.StreamResponse:
    """Exactly one upstream request; its answer streamed back or handed to the failure path
    (with this config's `answers`)."""
    limits = ctx.state.config.limits
    body = None
    if request.body_exists:
        body = RequestBody(
            request.content,
            limits.max_request_body_bytes,
            limits.request_body_timeout_s,
            digest=ctx.body_hasher,
            keep_bytes=_replay_bytes(request, limits.replay_body_bytes),
        )
    upgrade = WEBSOCKET if websocket_upgrade(request) else None
    upstream = await call_upstream(
        ctx, target, body, interim=functools.partial(relay_interim, request), upgrade=upgrade
    )
    if isinstance(upstream, Refusal):  # nothing was sent: the gateway's own limit
        refused = await refuse(ctx, upstream)
        if body is not None and body.untouched:
            refused.force_close()  # the client may still be sending the body nobody reads
        return refused
    if isinstance(upstream, TransportKind):
        if body is not None and body.failure is not None:
            return await _body_failure(body.failure, ctx)
        return await answer_transport_failure(ctx, upstream)
    if upstream.status == 101:  # only ever the answer to a WebSocket handshake
        return await tunnel(request, ctx, upstream)
    try:
        if upstream.status < 400 and not ctx.state.classifier.has_rules_for(upstream.status):
            headers = client_response_headers(upstream.headers)
            echo_request_id(headers, ctx.record)
            response = await relay(request, upstream, headers)
        else:
            response = await answer_upstream_failure(ctx, upstream, answers)
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


async def _body_failure(failure: BodyTooLarge | BodyStalled, ctx: RequestContext) -> web.Response:
    """The client's body broke a limit: the rest of it is unread, so the connection ends."""
    too_large = isinstance(failure, BodyTooLarge)
    response = await refuse(ctx, Refusal.BODY_TOO_LARGE if too_large else Refusal.BODY_TIMEOUT)
    response.force_close()
    return response
