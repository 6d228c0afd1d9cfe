"""The failure path: read the error body within the cap, enrich it, answer for the mode.

Enrichment is the one step in `gateway.enrich.step` (classify → resolve → render under
`enrich_budget_ms`); when it fails open this sends the upstream's original status, headers and
bytes: the gateway never makes a response worse than no gateway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web
from multidict import CIMultiDict

from gateway.classify import ObservationKind
from gateway.enrich.envelope import TEXT_TYPE, Rendering
from gateway.failure import Mode, TransportKind
from gateway.header_names import REQUEST_ID
from gateway.proxy.body import decoded_for_matching
from gateway.proxy.context import RequestContext, echo_request_id
from gateway.proxy.headers import client_response_headers
from gateway.proxy.relay import RewrittenResponse, relay
from gateway.proxy.rewritten_headers import drop_body_bound
from gateway.proxy.upstream.exchange import UpstreamResponse
from gateway.telemetry.metrics import FallbackReason

log = logging.getLogger("mendpoint.proxy")

NO_BODY_STATUSES = frozenset({204, 304})
STREAM_TYPES = ("text/event-stream", "multipart/x-mixed-replace")


async def answer_upstream_failure(
    ctx: RequestContext, upstream: UpstreamResponse
) -> web.StreamResponse:
    """An upstream response that rules must look at (any 4xx/5xx, or a status a rule names)."""
    limits = ctx.state.config.limits
    cap = limits.error_body_bytes
    content_type = upstream.headers.get("Content-Type", "")
    prefix, complete = b"", False
    if _has_no_body(ctx.request.method, upstream.status) or _is_stream(content_type):
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
    rendering = await ctx.state.answers.response(obs, ctx.answer_context(mode))
    headers = client_response_headers(upstream.headers)
    echo_request_id(headers, ctx.record)
    body = apply_rendering(headers, rendering, upstream.status)
    if body is not None:
        return RewrittenResponse(
            status=upstream.status, reason=upstream.reason, body=body, headers=headers
        )
    return await relay(ctx.request, upstream, headers, prefix, complete=complete)


async def answer_transport_failure(ctx: RequestContext, kind: TransportKind) -> web.StreamResponse:
    """A synthesised 502 (or 504 on timeout) for an exchange that produced no response."""
    log.info(
        "upstream transport failure %s route=%s request_id=%s",
        kind.value,
        ctx.route.spec.name,
        ctx.request_id,
    )
    obs = ctx.observation(ObservationKind.TRANSPORT, transport=kind)
    rendering = await ctx.state.answers.response(obs, ctx.answer_context())
    headers: CIMultiDict[str] = CIMultiDict({REQUEST_ID: ctx.request_id})
    status, body = synthesised(kind, headers, rendering)
    return web.Response(status=status, body=body, headers=headers)


def matchable(
    method: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes | None,
    cap: int,
    mode: Mode,
) -> tuple[bytes | None, Mode, bool]:
    """What the rules may read of an error body, the mode it can still be delivered in, and
    whether an upgrade was lost to it (`explain` decides with this too).

    `body` is the whole body as read, or None when it was not (no body, a stream, over the
    cap). A body not read whole, or encoded in a way that cannot be undone within the cap,
    cannot be rewritten without losing it: it passes as is, with headers at most.
    """
    if _has_no_body(method, status) or _is_stream(headers.get("Content-Type", "")):
        return None, _at_most_headers(mode), False
    matched = None
    if body is not None:
        matched = decoded_for_matching(body, headers.get("Content-Encoding", ""), cap)
    if matched is None:
        return None, _at_most_headers(mode), mode in (Mode.ADDITIVE, Mode.ENVELOPE)
    return matched, mode, False


def apply_rendering(
    headers: CIMultiDict[str], rendering: Rendering | None, status: int
) -> bytes | None:
    """Put a rendering onto the headers the client gets; the new body, or None: the upstream's.

    `explain` builds its answer with this too, so what it shows is what the proxy sends.
    """
    if rendering is None:
        return None
    if rendering.body is not None:
        drop_body_bound(headers, status)
    headers.extend(rendering.headers)
    if rendering.content_type is not None:
        headers["Content-Type"] = rendering.content_type
    return rendering.body


def synthesised(
    kind: TransportKind, headers: CIMultiDict[str], rendering: Rendering | None
) -> tuple[int, bytes]:
    """Status and body of the answer to an exchange with no response (headers completed)."""
    status = 504 if kind in (TransportKind.CONNECT_TIMEOUT, TransportKind.READ_TIMEOUT) else 502
    body = apply_rendering(headers, rendering, status)
    if body is None:
        reason = "Upstream timed out" if status == 504 else "Upstream unavailable"
        body = f"{reason} ({kind.value})\n".encode()
        headers["Content-Type"] = TEXT_TYPE
    return status, body


def _has_no_body(method: str, status: int) -> bool:
    return method == "HEAD" or status in NO_BODY_STATUSES or status < 200


def _is_stream(content_type: str) -> bool:
    lowered = content_type.lower()
    return any(lowered.startswith(t) for t in STREAM_TYPES)


def _at_most_headers(mode: Mode) -> Mode:
    return Mode.HEADERS if mode in (Mode.ADDITIVE, Mode.ENVELOPE) else mode
