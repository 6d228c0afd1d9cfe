"""An HTTP route's failure path: read the upstream's error body within the cap, answer it.

What the answer is, for every mode and case, is decided in gateway/exchange/answer.py; this
module reads what that needs (the body, within `limits.error_body_bytes`, under the response
deadline) and sends the result: the rewritten answer, or the upstream's own bytes relayed as
they came when enrichment fell open. The gateway never makes a response worse than no gateway.
"""

from __future__ import annotations

from aiohttp import web

from gateway.classify import ObservationKind
from gateway.exchange.answer import apply_rendering, has_no_body, is_stream, matchable
from gateway.exchange.context import RequestContext, echo_request_id
from gateway.exchange.headers import client_response_headers
from gateway.exchange.own_answers import answer_transport_failure
from gateway.exchange.relay import RewrittenResponse, relay
from gateway.exchange.upstream.round_trip import UpstreamResponse
from gateway.failure import TransportKind
from gateway.http.cached_answers import CachedAnswers
from gateway.telemetry.metrics import FallbackReason


async def answer_upstream_failure(
    ctx: RequestContext, upstream: UpstreamResponse, answers: CachedAnswers
) -> web.StreamResponse:
    """An upstream response that rules must look at (any 4xx/5xx, or a status a rule names)."""
    cap = ctx.state.config.limits.error_body_bytes
    content_type = upstream.headers.get("Content-Type", "")
    prefix, complete = b"", False
    if has_no_body(ctx.request.method, upstream.status) or is_stream(content_type):
        pass  # nothing to read, or a stream that must flow: headers only
    elif upstream.content_length is None or upstream.content_length <= cap:
        # Small error bodies usually arrive with the head: then nothing waits, and no timer.
        deadline = None if upstream.content.is_eof() else ctx.deadline
        read = await upstream.read_capped(cap, deadline.when if deadline else None)
        if isinstance(read, TransportKind):
            return await answer_transport_failure(ctx, read)
        prefix, complete = read.data, read.whole
    matched, mode, lost = matchable(
        ctx.request.method,
        upstream.status,
        upstream.headers,
        prefix if complete else None,
        cap,
        ctx.mode,
    )
    if lost:
        ctx.fell_back(FallbackReason.BODY_TOO_LARGE)
    obs = ctx.observation(
        ObservationKind.STATUS,
        status=upstream.status,
        headers=upstream.headers,
        body=matched,
        content_type=content_type,
    )
    rendering = await answers.response(obs, ctx.failure_context(mode=mode), ctx.route_answers)
    headers = client_response_headers(upstream.headers)
    echo_request_id(headers, ctx.record)
    body = apply_rendering(headers, rendering, upstream.status)
    if body is not None:
        return RewrittenResponse(
            status=upstream.status, reason=upstream.reason, body=body, headers=headers
        )
    return await relay(ctx.request, upstream, headers, prefix, complete=complete)
