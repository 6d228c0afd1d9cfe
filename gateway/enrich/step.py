"""The one enrichment step: classify → resolve → render, failing open, counted.

Every place that meets a failure calls it: the HTTP failure path (`gateway.http.failure_path`),
every MCP transport (`gateway.mcp.upgrade`, for the Streamable HTTP route, the bridge and stdio) and
`mendpoint explain`. They differ only in how a classified failure is rendered (a response for
the mode, or a rewritten JSON-RPC message), which they pass in as a function.

Takes an `Observation` (what the rules look at) and a `FailureContext` (who asked, in which
mode, where to write the outcome down); returns the rendering, or None for "send the
original bytes". The step runs under `enrich_budget_ms`: running over it, or any exception
inside it (the rendering included), returns None: the gateway never makes a response worse
than no gateway (docs/spec.md, resolution guarantees). `CancelledError` is never caught.

Each classification is told once, in every mode, `original` included (shadow traffic shows
what would change), to the failure observers the app declared (gateway/observers.py: the
metrics, the request's access record and span, captures, the unmatched signatures), in their
declared order; so are an upgraded answer and a fallback with its reason. The step names
none of them.
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
from gateway.failure import NO_RECOVERY, Failure, Mode, Recovery
from gateway.observers import Classified, FailureNotes, FailureObserver
from gateway.resolve.callers import Caller
from gateway.resolve.catalog import Catalog
from gateway.resolve.service import RecoveryService, Situation
from gateway.telemetry.metrics import FallbackReason

log = logging.getLogger("mendpoint.enrich")

T = TypeVar("T")
Render = Callable[[Verdict, Recovery, int], T | None]
"""The verdict, its recovery block and the request's duration so far → what to send (None:
the original). Called in every mode; in `original` mode with no recovery resolved."""


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
    notes: FailureNotes | None = None
    """The request's own record (its access line and span), for the observers to write on."""


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
        observers: tuple[FailureObserver, ...] = (),
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
        self.observers = observers
        """Told of every classification, upgrade and fallback, in this order
        (gateway/observers.py); none offline."""
        self.live = live
        """False for offline use (`explain`, fixtures): nothing is counted or logged as a
        fallback, and there is no budget."""
        self.clock = clock
        """`time.monotonic`: what `meta.duration_ms` counts with (fixed in tests)."""

    @classmethod
    def build(
        cls,
        loaded: LoadedConfig,
        observers: tuple[FailureObserver, ...] = (),
        redactor: Redactor | None = None,
    ) -> Enricher:
        """The data path's step: the config's budgets, its resolver (local or remote), the
        failure observers the app declares for it and the config's redactor (compiled here
        unless given)."""
        config = loaded.config
        recovery = RecoveryService.build(loaded)
        return cls(
            Classifier(loaded),
            recovery,
            prefix=config.headers.prefix,
            budget_s=config.enrich_budget_ms / 1000,
            resolver_budget_s=config.resolver.budget_ms / 1000,
            redactor=redactor or Redactor.build(config.redaction),
            observers=observers,
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
            self.upgraded(ctx.route, ctx.mode)
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

    def count(
        self, obs: Observation, ctx: FailureContext, failure: Failure, rule: str, is_default: bool
    ) -> None:
        """Tell the observers of one classified failure (a replayed one included)."""
        if not self.observers:
            return
        event = Classified(
            route=ctx.route,
            mode=ctx.mode,
            request_id=ctx.request_id,
            method=obs.method,
            path=obs.path,
            status=obs.status,
            transport=obs.transport,
            refusal=obs.refusal,
            headers=obs.headers,
            body=obs.body,
            tool=obs.tool,
            operation=ctx.situation.operation,
            failure=failure,
            rule=rule,
            is_default=is_default,
            notes=ctx.notes,
        )
        for observer in self.observers:
            observer.classified(event)

    def upgraded(self, route: str, mode: Mode) -> None:
        for observer in self.observers:
            observer.upgraded(route, mode)

    def fell_back(self, route: str, notes: FailureNotes | None, reason: FallbackReason) -> None:
        """The original response goes out instead of an upgraded one."""
        for observer in self.observers:
            observer.fell_back(route, reason.value, notes)

    def note_fallback(self, ctx: FailureContext, reason: FallbackReason) -> None:
        if not self.live:
            return
        log.warning(
            "enrichment fell back (%s); original sent request_id=%s", reason.value, ctx.request_id
        )
        self.fell_back(ctx.route, ctx.notes, reason)

    async def close(self) -> None:
        await self.recovery.close()
