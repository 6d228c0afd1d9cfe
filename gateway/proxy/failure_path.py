"""The failure path: read the error body within the cap, enrich it, answer for the mode.

Enrichment (classify → resolve → render) runs under `enrich_budget_ms`. Any exception in it,
or running over budget, sends the upstream's original status, headers and bytes: the gateway
never makes a response worse than no gateway. `CancelledError` is never caught.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiohttp import web
from multidict import CIMultiDict

from gateway.capture import Exchange as CapturedExchange
from gateway.capture import sample_draw
from gateway.classify import Observation
from gateway.classify.rules import CompiledRule
from gateway.envelope import Exchange, Rendering, render
from gateway.failure import Failure, Mode, Recovery, TransportKind
from gateway.header_names import REQUEST_ID
from gateway.observe import (
    ENVELOPES,
    FAILURES,
    UNMATCHED,
    FallbackReason,
    status_class,
)
from gateway.proxy.body import decoded_for_matching
from gateway.proxy.client import UpstreamResponse
from gateway.proxy.context import RequestContext, echo_request_id
from gateway.proxy.headers import client_response_headers
from gateway.proxy.relay import relay
from gateway.proxy.state import CAPTURES, SIGNATURES
from gateway.proxy.upstream import UPSTREAM_ERRORS, transport_kind
from gateway.streams import read_capped

log = logging.getLogger("mendpoint.proxy")

NO_BODY_STATUSES = frozenset({204, 304})
# Headers that describe the upstream's exact bytes; wrong once the body is rewritten.
BODY_BOUND_HEADERS = (
    "Content-Length",
    "Content-Encoding",
    "ETag",
    "Content-MD5",
    "Digest",
    "Content-Digest",
    "Repr-Digest",
    "Content-Range",
    "Accept-Ranges",
)
STREAM_TYPES = ("text/event-stream", "multipart/x-mixed-replace")


async def answer_upstream_failure(
    ctx: RequestContext, upstream: UpstreamResponse
) -> web.StreamResponse:
    """An upstream response that rules must look at (any 4xx/5xx, or a status a rule names)."""
    limits = ctx.state.loaded.config.limits
    cap = limits.error_body_bytes
    content_type = upstream.headers.get("Content-Type", "")
    mode = ctx.mode
    prefix, complete = b"", True
    if _has_no_body(ctx.request.method, upstream.status) or _is_stream(content_type):
        complete = False
        mode = _at_most_headers(mode)
    elif upstream.content_length is not None and upstream.content_length > cap:
        complete = False
    else:
        # Small error bodies usually arrive with the head: then nothing waits, and no timer.
        deadline = None if upstream.content.is_eof() else ctx.deadline
        try:
            async with asyncio.timeout_at(deadline.when) if deadline else contextlib.nullcontext():
                prefix, complete = await read_capped(upstream.content, cap)
        except UPSTREAM_ERRORS as exc:
            return await answer_transport_failure(ctx, transport_kind(exc))
    matched = (
        None
        if not complete
        else decoded_for_matching(prefix, upstream.headers.get("Content-Encoding", ""), cap)
    )
    if matched is None:
        # Not read whole, or encoded in a way that cannot be undone within the cap: the
        # body cannot be rewritten without losing it, so it passes as is (headers only).
        if (
            mode in (Mode.ADDITIVE, Mode.ENVELOPE)
            and not _has_no_body(ctx.request.method, upstream.status)
            and not _is_stream(content_type)
        ):
            ctx.fell_back(FallbackReason.BODY_TOO_LARGE)
        mode = _at_most_headers(mode)
    obs = ctx.observation(
        status=upstream.status,
        headers=upstream.headers,
        body=matched,
        content_type=content_type,
    )
    rendering = await _enrich_or_none(ctx, obs, mode, _exchange(ctx, obs, upstream))
    headers = client_response_headers(upstream.headers)
    echo_request_id(headers, ctx.record)
    if rendering is not None and rendering.body is not None:
        return _rewritten(upstream.status, upstream.reason, headers, rendering)
    if rendering is not None:
        headers.extend(rendering.headers)
    return await relay(ctx.request, upstream, headers, prefix, complete=complete)


async def answer_transport_failure(ctx: RequestContext, kind: TransportKind) -> web.StreamResponse:
    """A synthesised 502 (or 504 on timeout) for an exchange that produced no response."""
    status = 504 if kind in (TransportKind.CONNECT_TIMEOUT, TransportKind.READ_TIMEOUT) else 502
    log.info(
        "upstream transport failure %s route=%s request_id=%s",
        kind.value,
        ctx.route.spec.name,
        ctx.request_id,
    )
    obs = ctx.observation(transport=kind)
    exchange = Exchange(
        request_id=ctx.request_id, duration_ms=0, upstream_status=None, transport=kind
    )
    rendering = await _enrich_or_none(ctx, obs, ctx.mode, exchange)
    headers: CIMultiDict[str] = CIMultiDict({REQUEST_ID: ctx.request_id})
    if rendering is None or rendering.body is None:
        reason = "Upstream timed out" if status == 504 else "Upstream unavailable"
        return web.Response(status=status, text=f"{reason} ({kind.value})\n", headers=headers)
    return _rewritten(status, None, headers, rendering)


async def _enrich_or_none(
    ctx: RequestContext, obs: Observation, mode: Mode, exchange: Exchange
) -> Rendering | None:
    """Classify, resolve and render within the budget; None means "send the original"."""
    budget_s = ctx.state.loaded.config.enrich_budget_ms / 1000
    begun = time.monotonic()
    try:
        async with ctx.state.recovery.budget(budget_s):
            rendering = await _enrich(ctx, obs, mode, exchange)
    except TimeoutError:
        log.warning("enrichment over budget; original response sent request_id=%s", ctx.request_id)
        ctx.fell_back(FallbackReason.ENRICH_BUDGET)
        return None
    except Exception:
        log.exception("enrichment failed; original response sent request_id=%s", ctx.request_id)
        ctx.fell_back(FallbackReason.EXCEPTION)
        return None
    if time.monotonic() - begun > budget_s:
        log.warning("enrichment over budget; original response sent request_id=%s", ctx.request_id)
        ctx.fell_back(FallbackReason.ENRICH_BUDGET)
        return None
    if rendering is not None and mode is not Mode.ORIGINAL:
        ENVELOPES.labels(route=ctx.route.spec.name, mode=mode.value).inc()
    return rendering


async def _enrich(
    ctx: RequestContext, obs: Observation, mode: Mode, exchange: Exchange
) -> Rendering | None:
    verdict = ctx.state.classifier.classify(obs)
    if verdict is None:
        return None
    failure = verdict.failure
    log.debug(
        "classified %s by rule %s (%s) request_id=%s",
        failure.code,
        verdict.rule.id,
        verdict.rule.origin,
        ctx.request_id,
    )
    _count(ctx, obs, verdict.rule, failure, mode)
    if mode is Mode.ORIGINAL and exchange.transport is None:
        return None
    recovery = await _recover(ctx, failure)
    exchange = _with_duration(exchange, ctx.elapsed_ms())
    prefix = ctx.state.loaded.config.headers.prefix
    return render(mode, failure, recovery, exchange, prefix)


def _count(
    ctx: RequestContext, obs: Observation, rule: CompiledRule, failure: Failure, mode: Mode
) -> None:
    """Every classification is counted, in every mode: shadow traffic shows what would change."""
    route = ctx.route.spec.name
    record = ctx.record
    record.failure_code, record.rule, record.mode = failure.code, rule.id, mode.value
    record.retryable, record.retry_after_ms = failure.retryable, failure.retry_after_ms
    FAILURES.labels(
        route=route,
        category=failure.category.value,
        code=failure.code,
        rule=rule.id,
        mode=mode.value,
    ).inc()
    if rule.is_default:
        status = str(obs.status) if obs.status is not None else f"transport:{obs.transport}"
        UNMATCHED.labels(route=route, status_class=_status_class_of(obs)).inc()
        ctx.request.app[SIGNATURES].record(route, status, failure.message)
    if ctx.route.spec.capture is not None:
        _capture(ctx, obs, rule, failure)


def _capture(ctx: RequestContext, obs: Observation, rule: CompiledRule, failure: Failure) -> None:
    """Record the failing exchange for `mendpoint suggest` (the route's `capture:`)."""
    spec = ctx.route.spec.capture
    assert spec is not None
    exchange = CapturedExchange(
        route=ctx.route.spec.name,
        method=obs.method,
        path=obs.path,
        status=obs.status,
        transport=obs.transport.value if obs.transport is not None else None,
        headers=obs.headers,
        body=obs.body,
        request_id=ctx.request_id,
        rule=rule.id,
        code=failure.code,
        default_rule=rule.is_default,
        message=failure.message,
    )
    ctx.request.app[CAPTURES].record(spec, exchange, ctx.state.redactor, sample_draw())


def _status_class_of(obs: Observation) -> str:
    return status_class(obs.status) if obs.status is not None else "transport"


async def _recover(ctx: RequestContext, failure: Failure) -> Recovery:
    budget_s = ctx.state.loaded.config.resolver.budget_ms / 1000
    return await ctx.state.recovery.recover_within(
        budget_s, failure, ctx.caller, ctx.situation, ctx.request_id
    )


def _exchange(ctx: RequestContext, obs: Observation, upstream: UpstreamResponse) -> Exchange:
    return Exchange(
        request_id=ctx.request_id,
        duration_ms=0,
        upstream_status=upstream.status,
        content_type=obs.content_type,
        body=obs.body,
        body_json=obs.json if obs.body is not None else None,
        upstream_retry_after="Retry-After" in upstream.headers,
    )


def _with_duration(exchange: Exchange, duration_ms: int) -> Exchange:
    return Exchange(
        request_id=exchange.request_id,
        duration_ms=duration_ms,
        upstream_status=exchange.upstream_status,
        content_type=exchange.content_type,
        body=exchange.body,
        body_json=exchange.body_json,
        transport=exchange.transport,
        upstream_retry_after=exchange.upstream_retry_after,
    )


def _rewritten(
    status: int, reason: str | None, headers: CIMultiDict[str], rendering: Rendering
) -> web.Response:
    for name in BODY_BOUND_HEADERS:
        headers.popall(name, None)
    headers.extend(rendering.headers)
    if rendering.content_type is not None:
        headers["Content-Type"] = rendering.content_type
    return web.Response(status=status, reason=reason, body=rendering.body, headers=headers)


def _has_no_body(method: str, status: int) -> bool:
    return method == "HEAD" or status in NO_BODY_STATUSES or status < 200


def _is_stream(content_type: str) -> bool:
    lowered = content_type.lower()
    return any(lowered.startswith(t) for t in STREAM_TYPES)


def _at_most_headers(mode: Mode) -> Mode:
    return Mode.HEADERS if mode in (Mode.ADDITIVE, Mode.ENVELOPE) else mode
