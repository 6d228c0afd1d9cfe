"""What an HTTP client receives for a failure: every answering decision, in one place.

Both transports answer over HTTP: an HTTP route relays an upstream's error; an MCP route
answers its transport faults and refusals the same way (its tool errors are rewritten
JSON-RPC messages: gateway/mcp/upgrade.py). The enrichment step (gateway/enrich/step.py)
classifies and resolves; this module decides status, headers and body for the mode:

    what happened          original          headers              additive        envelope
    ---------------------  ----------------  -------------------  --------------  -----------
    error body read whole  as sent           as sent + adv        merged¹ + adv   E + adv
    no body, a stream,     as sent           as sent + adv        as sent + adv   as sent
    over the cap, or a                                                            + adv
    coding not undone
    transport fault        502/504 reason²   502/504 reason²+adv  502/504 E+adv   502/504 E+adv
    own refusal            status, text³     status, text³ + adv  status, E+adv   status, E+adv
    fell open⁴             as without the gateway's rules, in every mode

    adv  the advisory headers: `X-Error-Code`, `-Retryable`, `-Recoverable` (prefix
         `headers.prefix`), `X-Recovery-Available`, and `Retry-After` (seconds, rounded up)
         when the failure is retryable with a delay and the upstream sent none
    E    the envelope, `application/json`
    ¹    a JSON object body gains the failure members where absent; any other body goes as
         sent, but a page (HTML, text, XML) to a client that prefers JSON on a route with
         `json_for_json_clients` gets E; such a route's page answers all say `Vary: Accept`
    ²    `CODE: message` as text/plain
    ³    the refusal's plain text (`PLAIN`, gateway/exchange/own_answers.py)
    ⁴    no rule matched, the step ran over `enrich_budget_ms`, or it raised: the upstream's
         status, headers and bytes; for a fault, `Upstream unavailable (KIND)` (or `timed
         out`); for a refusal, its plain text

The status is never changed: the upstream's, 502 (504 on a timeout) for a transport fault,
the refusal's own. A new body brings its `Content-Type` (E's, or the upstream's for a merged
body) and drops what described the old bytes (gateway/exchange/rewritten_headers.py).
`X-Request-Id` is on every answer. Header values come only from rule constants and booleans,
so nothing an upstream wrote can put CR/LF into a header. The shapes themselves (E, the
merge, `meta.original`) are the transport-neutral gateway/enrich/envelope.py; an HTTP route's
answer cache wraps `Answers` (gateway/http/cached_answers.py); `mendpoint explain` answers
through the same functions.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from multidict import CIMultiDict

from gateway.classify import Observation, Verdict
from gateway.classify.redact import Redactor
from gateway.config.route_model import MetaOriginalSpec, RouteSpec
from gateway.enrich.envelope import KEEP_ALL, FailureFacts, additive, envelope
from gateway.enrich.step import Enricher, FailureContext
from gateway.exchange.rewritten_headers import drop_body_bound
from gateway.failure import NO_RECOVERY, Failure, Mode, Recovery, Refusal, TransportKind
from gateway.telemetry.metrics import FallbackReason, count_envelope
from gateway.text.accept import prefers_json
from gateway.text.content_codings import decoded_for_matching
from gateway.text.json_text import dump

log = logging.getLogger("mendpoint.enrich")

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
PAGE_TYPES = frozenset(
    {"text/html", "application/xhtml+xml", "text/plain", "application/xml", "text/xml"}
)
"""Bodies a JSON client cannot use: enveloped for it when its route says so. Also any
`+xml` type, and text sent untyped or as `application/octet-stream` (nginx's default type)."""
UNTYPED = frozenset({"", "application/octet-stream"})
TEXT_PROBE_BYTES = 1024
NO_BODY_STATUSES = frozenset({204, 304})
STREAM_TYPES = ("text/event-stream", "multipart/x-mixed-replace")
UPGRADED = (Mode.ADDITIVE, Mode.ENVELOPE)


@dataclass(frozen=True, slots=True)
class Rendering:
    """The changes to an answer: headers to add and, when the body changes, its bytes."""

    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    content_type: str | None = None


@dataclass(frozen=True, slots=True)
class RouteAnswers:
    """What an HTTP route and the request's `Accept` decide about a failure's body."""

    json_clients: bool = False
    """The route answers a JSON client's HTML or text error with the envelope."""
    prefers_json: bool = False
    """The request's `Accept` prefers JSON over HTML (gateway/text/accept.py)."""
    original: MetaOriginalSpec = KEEP_ALL
    """What `meta.original` keeps of the body (`routes[].meta_original`)."""

    @classmethod
    def of(cls, spec: RouteSpec, accept: str | None) -> RouteAnswers:
        json_clients = spec.json_for_json_clients and spec.type == "http"
        return cls(json_clients, prefers_json(accept), spec.meta_original)


NO_ROUTE_ANSWERS = RouteAnswers()
"""No route (or an MCP route's own answers): no JSON for JSON clients, the whole body kept."""


def failure_facts(
    obs: Observation, ctx: FailureContext, how: RouteAnswers, ms: int
) -> FailureFacts:
    """What a rendering needs of the upstream's answer, the same for the proxy and `explain`."""
    return FailureFacts(
        request_id=ctx.request_id,
        duration_ms=ms,
        upstream_status=obs.status,
        content_type=obs.content_type,
        body=obs.body,
        transport=obs.transport,
        refusal=obs.refusal,
        original=how.original,
    )


def render(
    mode: Mode,
    failure: Failure,
    recovery: Recovery,
    facts: FailureFacts,
    prefix: str,
    redactor: Redactor | None = None,
    how: RouteAnswers | None = None,
    upstream_retry_after: bool = False,
) -> Rendering:
    """The table's row for `facts` in `mode`; a `body` of None means "send the upstream's".

    `upstream_retry_after`: the upstream sent `Retry-After` (whatever its value); the proxy
    relays it and never adds a second one."""
    how = how or NO_ROUTE_ANSWERS
    headers = advisory_headers(failure, recovery, prefix, upstream_retry_after)
    synthesized = facts.transport is not None
    if mode is Mode.ORIGINAL:
        return Rendering([], _plain_reason(failure), TEXT_TYPE) if synthesized else Rendering()
    if mode is Mode.HEADERS:
        if synthesized:
            return Rendering(headers, _plain_reason(failure), TEXT_TYPE)
        return Rendering(headers)
    if mode is Mode.ENVELOPE or synthesized or facts.refusal is not None:
        # No upstream body to add to: the envelope is the whole answer.
        return Rendering(headers, dump(envelope(failure, recovery, facts, redactor)), JSON_TYPE)
    merged = additive(facts.body, facts.content_type, failure, recovery, facts.request_id)
    if merged is not None:
        return Rendering(headers, merged, None)
    if how.json_clients and is_page(facts.content_type, facts.body):
        headers.append(("Vary", "Accept"))  # a cache must not give one client's answer to the other
        if how.prefers_json:
            body = dump(envelope(failure, recovery, facts, redactor))
            return Rendering(headers, body, JSON_TYPE)
    return Rendering(headers)


def advisory_headers(
    failure: Failure, recovery: Recovery, prefix: str, upstream_retry_after: bool
) -> list[tuple[str, str]]:
    headers = [
        (f"{prefix}Code", failure.code),
        (f"{prefix}Retryable", _bool(failure.retryable)),
        (f"{prefix}Recoverable", _bool(failure.recoverable)),
        ("X-Recovery-Available", _bool(recovery.available)),
    ]
    if failure.retryable and failure.retry_after_ms is not None and not upstream_retry_after:
        headers.append(("Retry-After", retry_after_value(failure.retry_after_ms)))
    return headers


def retry_after_value(retry_after_ms: int) -> str:
    """`Retry-After` in whole seconds, rounded up, for a delay in milliseconds."""
    return str(math.ceil(retry_after_ms / 1000))


def is_page(content_type: str, body: bytes | None = None) -> bool:
    """An HTML, plain-text or XML body (the media type, parameters aside), or a text body
    whose type says nothing (none, or `application/octet-stream`)."""
    media = content_type.partition(";")[0].strip().lower()
    if media in PAGE_TYPES or media.endswith("+xml"):
        return True
    return media in UNTYPED and bool(body) and _reads_as_text(body or b"")


def matchable(
    method: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes | None,
    cap: int,
    mode: Mode,
) -> tuple[bytes | None, Mode, bool]:
    """The table's first two rows told apart: what the rules may read of an error body, the
    mode it can still be delivered in, and whether an upgrade was lost to it.

    `body` is the whole body as read, or None when it was not (no body, a stream, over the
    cap). A body not read whole, or encoded in a way that cannot be undone within the cap,
    cannot be rewritten without losing it: it passes as is, with headers at most.
    """
    if has_no_body(method, status) or is_stream(headers.get("Content-Type", "")):
        return None, _at_most_headers(mode), False
    matched = None
    if body is not None:
        matched = decoded_for_matching(body, headers.get("Content-Encoding", ""), cap)
    if matched is None:
        return None, _at_most_headers(mode), mode in UPGRADED
    return matched, mode, False


def apply_rendering(
    headers: CIMultiDict[str], rendering: Rendering | None, status: int
) -> bytes | None:
    """Put a rendering onto the headers the client gets; the new body, or None: the upstream's."""
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
    """The transport fault row: status and body of an exchange with no response."""
    status = 504 if kind in (TransportKind.CONNECT_TIMEOUT, TransportKind.READ_TIMEOUT) else 502
    body = apply_rendering(headers, rendering, status)
    if body is None:
        reason = "Upstream timed out" if status == 504 else "Upstream unavailable"
        body = f"{reason} ({kind.value})\n".encode()
        headers["Content-Type"] = TEXT_TYPE
    return status, body


def refused(
    refusal: Refusal, headers: CIMultiDict[str], rendering: Rendering | None, text: str
) -> tuple[int, bytes]:
    """The own refusal row: status and body (headers completed); the plain `text` as it is
    when there is no rendering."""
    body = apply_rendering(headers, rendering, refusal.status)
    if body is None:
        body = text.encode()
        headers["Content-Type"] = TEXT_TYPE
    return refusal.status, body


class Answers:
    """One config's enrichment step as HTTP answers use it: the rendering for the mode."""

    def __init__(self, step: Enricher) -> None:
        self.step = step

    async def response(
        self, obs: Observation, ctx: FailureContext, how: RouteAnswers = NO_ROUTE_ANSWERS
    ) -> Rendering | None:
        """The step for an HTTP answer: headers and body for `ctx.mode`, None for the original."""

        def rendered(verdict: Verdict, recovery: Recovery, duration_ms: int) -> Rendering | None:
            return self.rendering(obs, ctx, how, verdict, recovery, duration_ms)

        return await self.step.enrich(obs, ctx, rendered)

    def refused_now(self, obs: Observation, ctx: FailureContext) -> Rendering | None:
        """The step, synchronously and without the resolver, for a refusal answered where
        nothing can wait (a request head the parser refused, the connection cap): their
        failures name no repair intent, so the resolver would offer nothing anyway. Any
        exception returns None: the gateway's plain-text answer goes out."""
        try:
            verdict = self.step.classified(obs, ctx, time.monotonic() + self.step.budget_s)
            if verdict is None:
                return None
            result = self.rendering(obs, ctx, NO_ROUTE_ANSWERS, verdict, NO_RECOVERY, 0)
        except Exception:
            log.exception("enrichment failed; plain answer sent request_id=%s", ctx.request_id)
            self.step.note_fallback(ctx, FallbackReason.EXCEPTION)
            return None
        if result is not None and ctx.mode is not Mode.ORIGINAL and self.step.live:
            count_envelope(ctx.route, ctx.mode.value)
        return result

    def rendering(
        self,
        obs: Observation,
        ctx: FailureContext,
        how: RouteAnswers,
        verdict: Verdict,
        recovery: Recovery,
        duration_ms: int,
    ) -> Rendering | None:
        """The HTTP answer's changes for `ctx.mode` (None: the upstream's answer as it came)."""
        if ctx.mode is Mode.ORIGINAL and obs.transport is None:
            return None  # counted; the upstream's answer goes out as it came
        facts = failure_facts(obs, ctx, how, duration_ms)
        step = self.step
        sent_retry_after = "Retry-After" in obs.headers
        failure = verdict.failure
        return render(
            ctx.mode, failure, recovery, facts, step.prefix, step.redactor, how, sent_retry_after
        )


def has_no_body(method: str, status: int) -> bool:
    return method == "HEAD" or status in NO_BODY_STATUSES or status < 200


def is_stream(content_type: str) -> bool:
    lowered = content_type.lower()
    return any(lowered.startswith(t) for t in STREAM_TYPES)


def _at_most_headers(mode: Mode) -> Mode:
    return Mode.HEADERS if mode in UPGRADED else mode


def _reads_as_text(body: bytes) -> bool:
    """UTF-8 with no control characters but line breaks and tabs (a cut character at the
    probe's end aside)."""
    head = body[:TEXT_PROBE_BYTES]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:
            return False
        text = head[: exc.start].decode("utf-8")
    return not any((c < " " and c not in "\t\r\n") or c == "\x7f" for c in text)


def _plain_reason(failure: Failure) -> bytes:
    return f"{failure.code}: {failure.message}\n".encode()


def _bool(value: bool) -> str:
    return "true" if value else "false"
