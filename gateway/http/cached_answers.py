"""An HTTP route's failure answers with its answer cache: a repeated failure replayed.

Wraps the answering every route shares (`Answers`, gateway/exchange/answer.py) for the one
case worth keeping: an upstream's error that arrives again and again. A failure answered
before with everything it depends on the same is answered from the cache
(gateway/http/answer_cache.py), with this request's id, duration and counts; anything else
(a transport fault, a refusal, an MCP failure) goes through `Answers` unchanged.
`mendpoint explain` answers through `Answers` itself, so it prints what the proxy sends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from gateway.classify import Observation, Verdict
from gateway.classify.templates import retry_delay_ms
from gateway.config.loaded import LoadedConfig
from gateway.enrich.step import FailureContext
from gateway.exchange.answer import NO_ROUTE_ANSWERS, Answers, Rendering, RouteAnswers
from gateway.failure import Mode, Recovery
from gateway.http.answer_cache import AnswerCache, CachedAnswer, fillable
from gateway.telemetry.metrics import count_answer_cache, count_envelope


class CachedAnswers:
    """One config's `Answers` for an HTTP route's upstream failures, and its answer cache."""

    def __init__(self, answers: Answers, cache: AnswerCache | None = None) -> None:
        self.plain = answers
        self.step = answers.step
        self.answers = cache if self.step.live else None
        """Repeated failures' answers (gateway/http/answer_cache.py); None: every one enriched."""

    @classmethod
    def build(cls, loaded: LoadedConfig, answers: Answers) -> CachedAnswers:
        limits = loaded.config.limits
        # A remote resolver may answer differently each time: its answers are never kept.
        keeps = limits.answer_cache_entries > 0 and answers.step.recovery.remote is None
        cache = AnswerCache(limits.answer_cache_entries, limits.answer_cache_bytes)
        return cls(answers, cache if keeps else None)

    async def response(
        self, obs: Observation, ctx: FailureContext, how: RouteAnswers = NO_ROUTE_ANSWERS
    ) -> Rendering | None:
        """`Answers.response`, from the answer cache when the same failure was answered before."""
        key = self.answer_key(obs, ctx, how)
        if key is None or self.answers is None:
            return await self.plain.response(obs, ctx, how)
        kept = self.answers.get(key)
        retry_after_ms = None if kept is None else self._retry_delay(kept, obs)
        if kept is not None and (retry_after_ms is not None or not kept.timed):
            count_answer_cache(True)
            return self._replay(kept, obs, ctx, retry_after_ms)
        count_answer_cache(False)
        return await self._remember(self.answers, key, obs, ctx, how)

    def answer_key(
        self, obs: Observation, ctx: FailureContext, how: RouteAnswers
    ) -> Hashable | None:
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
            how.json_clients,
            how.prefers_json,
            ctx.caller.scopes,
            ctx.situation,
            obs.route,
            obs.method,
            obs.path,
            obs.query,
            obs.idempotent,
            obs.idempotency_key,
            obs.status,
            obs.content_type,
            obs.body,
            tuple(headers.get(name) for name in self.step.classifier.headers_read),
        )

    async def _remember(
        self,
        cache: AnswerCache,
        key: Hashable,
        obs: Observation,
        ctx: FailureContext,
        how: RouteAnswers,
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
            template = self.plain.rendering(
                obs, template_ctx, how, shown, recovery, cache.duration_ms
            )
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
            return self.plain.rendering(obs, ctx, how, verdict, recovery, duration_ms)
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
