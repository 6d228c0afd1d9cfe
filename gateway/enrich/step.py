"""The one enrichment step: classify → resolve → render, failing open, counted.

Every place that meets a failure calls it: the HTTP failure path (`proxy.http_failure`),
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

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gateway.classify import Classifier, Observation, Verdict
from gateway.classify.redact import Redactor
from gateway.config.loaded import LoadedConfig
from gateway.config.route_model import CaptureSpec, MetaOriginalSpec
from gateway.enrich.envelope import KEEP_ALL
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
    count_envelope,
    count_failure,
    count_unmatched,
    status_class,
)

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


def fell_back(route: str, record: AccessRecord | None, reason: FallbackReason) -> None:
    """The original response goes out instead of an upgraded one: counted and logged."""
    if record is not None:
        record.fallback = reason.value
    FALLBACKS.labels(route=route, reason=reason.value).inc()


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
        self.clock = clock
        """`time.monotonic`: what `meta.duration_ms` counts with (fixed in tests)."""

    @classmethod
    def build(cls, loaded: LoadedConfig) -> Enricher:
        """The data path's step: the config's budgets, its resolver (local or remote)."""
        config = loaded.config
        recovery = RecoveryService.build(loaded)
        return cls(
            Classifier(loaded),
            recovery,
            prefix=config.headers.prefix,
            budget_s=config.enrich_budget_ms / 1000,
            resolver_budget_s=config.resolver.budget_ms / 1000,
            redactor=Redactor.build(config.redaction),
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
            self.note_fallback(ctx, FallbackReason.ENRICH_BUDGET)
            return None
        except Exception:
            log.exception("enrichment failed; original sent request_id=%s", ctx.request_id)
            self.note_fallback(ctx, FallbackReason.EXCEPTION)
            return None
        if time.monotonic() - begun > self.budget_s:
            self.note_fallback(ctx, FallbackReason.ENRICH_BUDGET)
            return None
        if result is not None and ctx.mode is not Mode.ORIGINAL:
            count_envelope(ctx.route, ctx.mode.value)
        return result

    async def _enrich(
        self, obs: Observation, ctx: FailureContext, render: Render[T], deadline: float
    ) -> T | None:
        verdict = self.classified(obs, ctx, deadline)
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

    def classified(self, obs: Observation, ctx: FailureContext, deadline: float) -> Verdict | None:
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
            self.count(obs, ctx, failure, verdict.rule.id, verdict.rule.is_default)
        return verdict

    @staticmethod
    def count(
        obs: Observation, ctx: FailureContext, failure: Failure, rule: str, is_default: bool
    ) -> None:
        record = ctx.record
        if record is not None:
            record.failure_code, record.rule, record.mode = failure.code, rule, ctx.mode.value
            record.retryable, record.retry_after_ms = failure.retryable, failure.retry_after_ms
            if record.trace is not None:
                record.trace.classified(
                    failure.code,
                    failure.category.value,
                    rule,
                    failure.retryable,
                    failure.retry_after_ms,
                    ctx.mode.value,
                )
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

    def note_fallback(self, ctx: FailureContext, reason: FallbackReason) -> None:
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
