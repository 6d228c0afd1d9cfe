"""How an HTTP route answers a failure: the shared step, rendered for the route's mode.

The enrichment step (`gateway.enrich.step`) is the same for every transport; what an HTTP
answer adds is decided here: the route's `json_for_json_clients` and `meta_original` with the
request's `Accept` (`RouteAnswers`), the headers and body for the mode (`rendering`), the
answer cache that replays a repeated failure's answer with this request's id
(gateway/exchange/answer_cache.py), and the synchronous answer for a refusal where nothing can
wait (`refused_now`). `mendpoint explain` renders through the same `HttpAnswers`, so it
prints what the proxy would send.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass

from gateway.classify import Observation, Verdict
from gateway.classify.templates import retry_delay_ms
from gateway.config.loaded import LoadedConfig
from gateway.config.route_model import MetaOriginalSpec, RouteSpec
from gateway.enrich.envelope import KEEP_ALL, FailureFacts, Rendering, render
from gateway.enrich.step import Enricher, FailureContext
from gateway.exchange.answer_cache import AnswerCache, CachedAnswer, fillable
from gateway.failure import NO_RECOVERY, Mode, Recovery
from gateway.telemetry.metrics import FallbackReason, count_answer_cache, count_envelope
from gateway.text.accept import prefers_json

log = logging.getLogger("mendpoint.enrich")


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


class HttpAnswers:
    """The step of one config as HTTP routes answer with it, and its answer cache."""

    def __init__(self, step: Enricher, cache: AnswerCache | None = None) -> None:
        self.step = step
        self.answers = cache if step.live else None
        """Repeated failures' answers (exchange/answer_cache.py); None: every one enriched."""

    @classmethod
    def build(cls, loaded: LoadedConfig, step: Enricher) -> HttpAnswers:
        limits = loaded.config.limits
        # A remote resolver may answer differently each time: its answers are never kept.
        keeps = limits.answer_cache_entries > 0 and step.recovery.remote is None
        cache = AnswerCache(limits.answer_cache_entries, limits.answer_cache_bytes)
        return cls(step, cache if keeps else None)

    async def response(self, obs: Observation, ctx: FailureContext) -> Rendering | None:
        """The step for an HTTP answer: headers and body for `ctx.mode`, None for the original.

        A failure answered before with everything it depends on the same is answered from
        the answer cache, with this request's id, duration and counts
        (gateway/enrich/answer_cache.py).
        """
        key = self.answer_key(obs, ctx)
        if key is None or self.answers is None:
            return await self.step.enrich(obs, ctx, functools.partial(self.rendering, obs, ctx))
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
            tuple(headers.get(name) for name in self.step.classifier.headers_read),
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

        result = await self.step.enrich(obs, ctx, render)
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
        self.step.count(obs, ctx, failure, rule.id, rule.is_default)
        if kept.resolved:
            self.step.recovery.replayed(failure, kept.recovery)
        duration_ms = int((self.step.clock() - ctx.started) * 1000)
        result = kept.answer(ctx.request_id, duration_ms, retry_after_ms)
        if result is not None and ctx.mode is not Mode.ORIGINAL:
            count_envelope(ctx.route, ctx.mode.value)
        return result

    def refused_now(self, obs: Observation, ctx: FailureContext) -> Rendering | None:
        """The step, synchronously and without the resolver, for a refusal answered where
        nothing can wait (a request head the parser refused, the connection cap): their
        failures name no repair intent, so the resolver would offer nothing anyway. Any
        exception returns None: the gateway's plain-text answer goes out."""
        try:
            verdict = self.step.classified(obs, ctx, time.monotonic() + self.step.budget_s)
            if verdict is None:
                return None
            result = self.rendering(obs, ctx, verdict, NO_RECOVERY, 0)
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
        verdict: Verdict,
        recovery: Recovery,
        duration_ms: int,
    ) -> Rendering | None:
        """The HTTP answer's changes for `ctx.mode` (None: the upstream's answer as it came)."""
        if ctx.mode is Mode.ORIGINAL and obs.transport is None:
            return None  # counted; the upstream's answer goes out as it came
        facts = failure_facts(obs, ctx, duration_ms)
        step = self.step
        return render(ctx.mode, verdict.failure, recovery, facts, step.prefix, step.redactor)


__all__ = [
    "NO_ROUTE_ANSWERS",
    "HttpAnswers",
    "RouteAnswers",
    "as_route_answers",
    "failure_facts",
]
