"""The one enrichment step: classify → resolve → render, failing open, counted.

Every place that meets a failure calls it: the HTTP failure path (`proxy.failure_path`),
every MCP transport (`mcp.upgrade`, for the Streamable HTTP route, the bridge and stdio) and
`mendpoint explain`. They differ only in how a classified failure is rendered (a response for
the mode, or a rewritten JSON-RPC message), which they pass in as a function.

Takes an `Observation` (what the rules look at) and a `FailureContext` (who asked, in which
mode, where to write the outcome down); returns the rendering, or None for "send the
original bytes". The step runs under `enrich_budget_ms`: running over it, or any exception
inside it (the rendering included), returns None: the gateway never makes a response worse
than no gateway (docs/spec.md, resolution guarantees). `CancelledError` is never caught.

Each classification is counted once, in every mode, `original` included (shadow traffic shows
what would change): `mendpoint_failures_total`, and for a failure only a shipped default
matched `mendpoint_unmatched_failures_total` and the signature `mendpoint gaps` reports; a
route with `capture:` records the exchange for `mendpoint suggest`. The request's access
record gets the code, rule and mode, or the reason it fell back.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from gateway.classify import Classifier, Observation, Verdict
from gateway.classify.redact import Redactor
from gateway.classify.templates import retry_delay_ms
from gateway.config.loaded import LoadedConfig
from gateway.config.models import CaptureSpec, MetaOriginalSpec, RouteSpec
from gateway.enrich.answer_cache import AnswerCache, CachedAnswer, fillable
from gateway.enrich.envelope import KEEP_ALL, FailureFacts, Rendering, render
from gateway.failure import NO_RECOVERY, Failure, Mode, Recovery
from gateway.feedback.capture import CapturedFailure, Captures, sample_draw
from gateway.feedback.signatures import SignatureBook
from gateway.resolve.callers import Caller
from gateway.resolve.catalog import Catalog
from gateway.resolve.service import RecoveryService, Situation
from gateway.telemetry.logs import AccessRecord
from gateway.telemetry.metrics import (
    FALLBACKS,
    FallbackReason,
    count_answer_cache,
    count_envelope,
    count_failure,
    count_unmatched,
    status_class,
)
from gateway.text.accept import prefers_json

log = logging.getLogger("mendpoint.enrich")

T = TypeVar("T")
Render = Callable[[Verdict, Recovery, int], T | None]
"""The verdict, its recovery block and the request's duration so far → what to send (None:
the original). Called in every mode; in `original` mode with no recovery resolved."""


@dataclass(frozen=True, slots=True)
class CaptureSink:
    """Where a route's `capture:` records its failing exchanges (for `mendpoint suggest`)."""

    spec: CaptureSpec
    captures: Captures
    redactor: Redactor


@dataclass(frozen=True, slots=True)
class FailureContext:
    """Who met the failure and how they want it delivered; built on failure paths only."""

    route: str
    mode: Mode
    request_id: str
    caller: Caller
    situation: Situation
    started: float
    """`time.monotonic()` when the request began: `meta.duration_ms` counts from here."""
    record: AccessRecord | None = None
    signatures: SignatureBook | None = None
    capture: CaptureSink | None = None
    json_clients: bool = False
    """The route answers an HTML or text error with the envelope to a client that prefers
    JSON (`routes[].json_for_json_clients`); HTTP routes only."""
    prefers_json: bool = False
    """The request's `Accept` prefers JSON over HTML (`gateway.text.accept.prefers_json`)."""
    original: MetaOriginalSpec = KEEP_ALL
    """What an envelope's `meta.original` keeps of the body (`routes[].meta_original`)."""


@dataclass(frozen=True, slots=True)
class RouteAnswers:
    """What an HTTP route and the request's `Accept` decide about a failure's body: the proxy
    (`RequestContext.answer_context`) and `explain` both decide with `of`, so they answer alike.
    """

    json_clients: bool = False
    prefers_json: bool = False
    original: MetaOriginalSpec = KEEP_ALL

    @classmethod
    def of(cls, spec: RouteSpec, accept: str | None) -> RouteAnswers:
        json_clients = spec.json_for_json_clients and spec.type == "http"
        return cls(json_clients, prefers_json(accept), spec.meta_original)


NO_ROUTE_ANSWERS = RouteAnswers()
"""MCP and transport contexts: no JSON-for-JSON-clients, the whole body in `meta.original`."""


def as_route_answers(ctx: FailureContext, spec: RouteSpec, accept: str | None) -> FailureContext:
    """`ctx` with `RouteAnswers.of(spec, accept)` (the proxy builds its context with them at
    once: `dataclasses.replace` costs a failure 2.4 µs, the fields 0.9 µs)."""
    answers = RouteAnswers.of(spec, accept)
    return dataclasses.replace(
        ctx,
        json_clients=answers.json_clients,
        prefers_json=answers.prefers_json,
        original=answers.original,
    )


def fell_back(route: str, record: AccessRecord | None, reason: FallbackReason) -> None:
    """The original response goes out instead of an upgraded one: counted and logged."""
    if record is not None:
        record.fallback = reason.value
    FALLBACKS.labels(route=route, reason=reason.value).inc()


def failure_facts(obs: Observation, ctx: FailureContext, duration_ms: int = 0) -> FailureFacts:
    """What a rendering needs of the upstream's answer, the same for the proxy and `explain`.

    `Retry-After` counts as sent when the header is there at all, whatever its value: the
    proxy relays the upstream's value and never adds a second one.
    """
    return FailureFacts(
        request_id=ctx.request_id,
        duration_ms=duration_ms,
        upstream_status=obs.status,
        content_type=obs.content_type,
        body=obs.body,
        transport=obs.transport,
        refusal=obs.refusal,
        upstream_retry_after="Retry-After" in obs.headers,
        json_clients=ctx.json_clients,
        prefers_json=ctx.prefers_json,
        original=ctx.original,
    )


class Enricher:
    """Classifier, recovery service, header prefix and budgets of one config, compiled once."""

    def __init__(
        self,
        classifier: Classifier,
        recovery: RecoveryService,
        *,
        prefix: str,
        budget_s: float,
        resolver_budget_s: float,
        redactor: Redactor,
        live: bool = True,
        answers: AnswerCache | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.classifier = classifier
        self.redactor = redactor
        """Applied to what the gateway copies out of a body: the failure's message and
        fields, an envelope's `meta.original`, captured exchanges (docs/security.md)."""
        self.recovery = recovery
        self.prefix = prefix
        self.budget_s = budget_s
        self.resolver_budget_s = resolver_budget_s
        self.live = live
        """False for offline use (`explain`, fixtures): nothing is counted or logged as a
        fallback, and there is no budget."""
        self.answers = answers if live else None
        """Repeated failures' answers (gateway/enrich/answer_cache.py); None: every one enriched."""
        self.clock = clock
        """`time.monotonic`: what `meta.duration_ms` counts with (fixed in tests)."""

    @classmethod
    def build(cls, loaded: LoadedConfig) -> Enricher:
        """The data path's step: the config's budgets, its resolver (local or remote)."""
        config = loaded.config
        limits = config.limits
        recovery = RecoveryService.build(loaded)
        # A remote resolver may answer differently each time: its answers are never kept.
        keeps = limits.answer_cache_entries > 0 and recovery.remote is None
        return cls(
            Classifier(loaded),
            recovery,
            prefix=config.headers.prefix,
            budget_s=config.enrich_budget_ms / 1000,
            resolver_budget_s=config.resolver.budget_ms / 1000,
            redactor=Redactor.build(config.redaction),
            answers=(
                AnswerCache(limits.answer_cache_entries, limits.answer_cache_bytes)
                if keeps
                else None
            ),
        )

    @classmethod
    def offline(cls, loaded: LoadedConfig, classifier: Classifier | None = None) -> Enricher:
        """The step as `explain` runs it: no budget, the local catalog, nothing counted."""
        spec = loaded.config.resolver
        catalog = Catalog.build(loaded.skills, loaded.policies)
        return cls(
            classifier or Classifier(loaded),
            RecoveryService(catalog, spec.max_options),
            prefix=loaded.config.headers.prefix,
            budget_s=math.inf,
            resolver_budget_s=math.inf,
            redactor=Redactor.build(loaded.config.redaction),
            live=False,
        )

    async def response(self, obs: Observation, ctx: FailureContext) -> Rendering | None:
        """The step for an HTTP answer: headers and body for `ctx.mode`, None for the original.

        A failure answered before with everything it depends on the same is answered from
        the answer cache, with this request's id, duration and counts
        (gateway/enrich/answer_cache.py).
        """
        key = self.answer_key(obs, ctx)
        if key is None or self.answers is None:
            return await self.enrich(obs, ctx, functools.partial(self.rendering, obs, ctx))
        kept = self.answers.get(key)
        retry_after_ms = None if kept is None else self._retry_delay(kept, obs)
        if kept is not None and (retry_after_ms is not None or not kept.timed):
            count_answer_cache(True)
            return self._replay(kept, obs, ctx, retry_after_ms)
        count_answer_cache(False)
        return await self._remember(self.answers, key, obs, ctx)

    def answer_key(self, obs: Observation, ctx: FailureContext) -> Hashable | None:
        """Everything an HTTP failure's answer depends on but its request id and duration;
        None when it is not to be kept (no cache, a transport fault, MCP, the gateway's own
        refusal, an odd request id).

        The route name stands for what its spec decides (`json_for_json_clients`,
        `meta_original`, idempotent methods) within one config; of the upstream's headers only
        those a rule or the rendering reads count (`Classifier.headers_read`).
        """
        if self.answers is None or obs.transport is not None or obs.tool is not None:
            return None
        if obs.jsonrpc_code is not None or obs.refusal is not None:
            return None  # MCP, or the gateway's own answer (rare, and not the upstream's)
        if not fillable(ctx.request_id):
            return None
        headers = obs.headers
        return (
            ctx.route,
            ctx.mode,
            ctx.json_clients,
            ctx.prefers_json,
            ctx.caller.scopes,
            ctx.situation,
            obs.route,
            obs.method,
            obs.path,
            obs.idempotent,
            obs.idempotency_key,
            obs.status,
            obs.content_type,
            obs.body,
            tuple(headers.get(name) for name in self.classifier.headers_read),
        )

    async def _remember(
        self, cache: AnswerCache, key: Hashable, obs: Observation, ctx: FailureContext
    ) -> Rendering | None:
        """Enrich as usual, rendering with the cache's sentinels, keep that, and fill it in."""
        template_ctx = dataclasses.replace(ctx, request_id=cache.request_id)
        made: list[tuple[Verdict, Recovery, int, Rendering | None]] = []

        def render(verdict: Verdict, recovery: Recovery, duration_ms: int) -> Rendering | None:
            shown = verdict
            if obs.clock_read and verdict.failure.retry_after_ms is not None:
                # The delay counts down to an instant: a hole, filled per request.
                timed = dataclasses.replace(verdict.failure, retry_after_ms=cache.retry_after_ms)
                shown = Verdict(timed, verdict.rule, verdict.captures)
            template = self.rendering(obs, template_ctx, shown, recovery, cache.duration_ms)
            made.append((verdict, recovery, duration_ms, template))
            return template

        result = await self.enrich(obs, ctx, render)
        if not made:
            return result  # no rule matched, or it fell open before rendering
        verdict, recovery, duration_ms, template = made[0]
        resolved = ctx.mode is not Mode.ORIGINAL
        retry_after_ms = verdict.failure.retry_after_ms
        timed = obs.clock_read and retry_after_ms is not None
        # Not kept: a verdict made with a regex that timed out (an unhurried search may
        # differ), or one that read the clock for anything but a retry delay.
        momentary = obs.regex_gave_up or (obs.clock_read and not timed)
        entry = (
            None
            if momentary
            else cache.keep(key, obs, verdict, recovery, resolved, template, timed)
        )
        if result is None:
            return None  # fell open after rendering (over budget): the original goes out
        if entry is None:
            return self.rendering(obs, ctx, verdict, recovery, duration_ms)
        return entry.answer(ctx.request_id, duration_ms, retry_after_ms)

    @staticmethod
    def _retry_delay(kept: CachedAnswer, obs: Observation) -> int | None:
        """A kept failure's retry delay for this request: worked out again from this moment
        when it counts down to an instant (None then: it could not be, enrich afresh)."""
        failure = kept.verdict.failure
        if not kept.timed:
            return failure.retry_after_ms
        return retry_delay_ms(kept.verdict.rule, obs, kept.verdict.captures)

    def _replay(
        self, kept: CachedAnswer, obs: Observation, ctx: FailureContext, retry_after_ms: int | None
    ) -> Rendering | None:
        """A kept answer for this request, counted and recorded as if enriched again."""
        failure = kept.verdict.failure
        rule = kept.verdict.rule
        if kept.timed:
            failure = dataclasses.replace(failure, retry_after_ms=retry_after_ms)
        self._count(obs, ctx, failure, rule.id, rule.is_default)
        if kept.resolved:
            self.recovery.replayed(failure, kept.recovery)
        duration_ms = int((self.clock() - ctx.started) * 1000)
        result = kept.answer(ctx.request_id, duration_ms, retry_after_ms)
        if result is not None and ctx.mode is not Mode.ORIGINAL:
            count_envelope(ctx.route, ctx.mode.value)
        return result

    async def enrich(self, obs: Observation, ctx: FailureContext, render: Render[T]) -> T | None:
        """Classify, resolve and `render` within the budget; None means "send the original".

        Offline (`explain`) nothing is caught: a rule that cannot be evaluated is reported.
        """
        begun = time.monotonic()
        if not self.live:
            return await self._enrich(obs, ctx, render, math.inf)
        try:
            async with self.recovery.budget(self.budget_s):
                result = await self._enrich(obs, ctx, render, begun + self.budget_s)
        except TimeoutError:
            self._fell_back(ctx, FallbackReason.ENRICH_BUDGET)
            return None
        except Exception:
            log.exception("enrichment failed; original sent request_id=%s", ctx.request_id)
            self._fell_back(ctx, FallbackReason.EXCEPTION)
            return None
        if time.monotonic() - begun > self.budget_s:
            self._fell_back(ctx, FallbackReason.ENRICH_BUDGET)
            return None
        if result is not None and ctx.mode is not Mode.ORIGINAL:
            count_envelope(ctx.route, ctx.mode.value)
        return result

    def refused_now(self, obs: Observation, ctx: FailureContext) -> Rendering | None:
        """The step, synchronously and without the resolver, for a refusal answered where
        nothing can wait (a request head the parser refused, the connection cap): their
        failures name no repair intent, so the resolver would offer nothing anyway. Any
        exception returns None: the gateway's plain-text answer goes out."""
        try:
            verdict = self._classified(obs, ctx, time.monotonic() + self.budget_s)
            if verdict is None:
                return None
            result = self.rendering(obs, ctx, verdict, NO_RECOVERY, 0)
        except Exception:
            log.exception("enrichment failed; plain answer sent request_id=%s", ctx.request_id)
            self._fell_back(ctx, FallbackReason.EXCEPTION)
            return None
        if result is not None and ctx.mode is not Mode.ORIGINAL and self.live:
            count_envelope(ctx.route, ctx.mode.value)
        return result

    async def _enrich(
        self, obs: Observation, ctx: FailureContext, render: Render[T], deadline: float
    ) -> T | None:
        verdict = self._classified(obs, ctx, deadline)
        if verdict is None:
            return None
        failure = verdict.failure
        recovery = NO_RECOVERY
        if ctx.mode is not Mode.ORIGINAL or obs.transport is not None:
            # In `original` mode nothing shows the options: no resolver call for shadow traffic.
            recovery = await self.recovery.recover_within(
                self.resolver_budget_s, failure, ctx.caller, ctx.situation, ctx.request_id
            )
        return render(verdict, recovery, int((self.clock() - ctx.started) * 1000))

    def _classified(self, obs: Observation, ctx: FailureContext, deadline: float) -> Verdict | None:
        """Classify and redact; counted and logged when live."""
        verdict = self.classifier.classify(obs, deadline)
        if verdict is None:
            return None
        failure = self.redactor.failure(verdict.failure)
        if failure is not verdict.failure:
            verdict = Verdict(failure, verdict.rule, verdict.captures)
        if self.live:
            log.debug(
                "classified %s by rule %s (%s) request_id=%s",
                failure.code,
                verdict.rule.id,
                verdict.rule.origin,
                ctx.request_id,
            )
            self._count(obs, ctx, failure, verdict.rule.id, verdict.rule.is_default)
        return verdict

    def rendering(
        self,
        obs: Observation,
        ctx: FailureContext,
        verdict: Verdict,
        recovery: Recovery,
        duration_ms: int,
    ) -> Rendering | None:
        """The HTTP answer's changes for `ctx.mode` (None: the upstream's answer as it came)."""
        if ctx.mode is Mode.ORIGINAL and obs.transport is None:
            return None  # counted; the upstream's answer goes out as it came
        facts = failure_facts(obs, ctx, duration_ms)
        return render(ctx.mode, verdict.failure, recovery, facts, self.prefix, self.redactor)

    @staticmethod
    def _count(
        obs: Observation, ctx: FailureContext, failure: Failure, rule: str, is_default: bool
    ) -> None:
        record = ctx.record
        if record is not None:
            record.failure_code, record.rule, record.mode = failure.code, rule, ctx.mode.value
            record.retryable, record.retry_after_ms = failure.retryable, failure.retry_after_ms
        count_failure(ctx.route, failure.category.value, failure.code, rule, ctx.mode.value)
        if ctx.capture is not None:
            _capture(obs, ctx, ctx.capture, failure, rule, is_default)
        if not is_default:
            return
        if obs.status is not None:
            status, kind = str(obs.status), status_class(obs.status)
        elif obs.transport is not None:
            status, kind = f"transport:{obs.transport}", "transport"
        else:
            status, kind = "mcp", "mcp"
        count_unmatched(ctx.route, kind)
        if ctx.signatures is not None:
            ctx.signatures.record(ctx.route, status, failure.message)

    def _fell_back(self, ctx: FailureContext, reason: FallbackReason) -> None:
        if not self.live:
            return
        log.warning(
            "enrichment fell back (%s); original sent request_id=%s", reason.value, ctx.request_id
        )
        fell_back(ctx.route, ctx.record, reason)

    async def close(self) -> None:
        await self.recovery.close()


def _capture(
    obs: Observation,
    ctx: FailureContext,
    sink: CaptureSink,
    failure: Failure,
    rule: str,
    is_default: bool,
) -> None:
    """Record the failing exchange, redacted and sampled, for `mendpoint suggest`."""
    captured = CapturedFailure(
        route=ctx.route,
        method=obs.method,
        path=obs.path,
        status=obs.status,
        transport=obs.transport.value if obs.transport is not None else None,
        headers=obs.headers,
        body=obs.body,
        request_id=ctx.request_id,
        rule=rule,
        code=failure.code,
        default_rule=is_default,
        message=failure.message,
    )
    sink.captures.record(sink.spec, captured, sink.redactor, sample_draw())
