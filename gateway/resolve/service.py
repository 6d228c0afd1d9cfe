"""The recovery block for one failure: local catalog or remote resolver, caller-scoped.

The proxy calls `RecoveryService.recover` under `resolver.budget_ms`; whatever goes wrong
(no skill, out of scope, policy, resolver error, budget) the caller sees the same
`NO_RECOVERY` block. Only the logs and `mendpoint explain` say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.config.loaded import LoadedConfig
from gateway.failure import NO_RECOVERY, Failure, Recovery, RecoveryOption
from gateway.resolve.breaker import (
    CircuitBreaker,
    CircuitOpen,
    ResolverUnavailable,
    TTLCache,
    Unsendable,
)
from gateway.resolve.callers import Caller
from gateway.resolve.catalog import Catalog
from gateway.resolve.local import ResolveQuery, resolve_locally
from gateway.telemetry.metrics import RESOLVER_LATENCY, ResolverOutcome, count_resolution
from gateway.telemetry.reporters import GapReporter
from gateway.telemetry.tracing import note_resolution

if TYPE_CHECKING:
    from gateway.resolve.remote import RemoteResolver

log = logging.getLogger("mendpoint.resolve")
_NO_TIMER = contextlib.nullcontext()


@dataclass(frozen=True, slots=True)
class Situation:
    """Where the failure happened: what `then_retry` names and the resolver's context."""

    operation: str
    route: str | None = None
    tool: str | None = None


class RecoveryService:
    def __init__(
        self,
        catalog: Catalog,
        max_options: int,
        remote: RemoteResolver | None = None,
        gaps: GapReporter | None = None,
    ) -> None:
        self.catalog = catalog
        self.max_options = max_options
        self.remote = remote
        self.gaps = gaps or GapReporter()

    @classmethod
    def build(cls, loaded: LoadedConfig) -> RecoveryService:
        spec = loaded.config.resolver
        remote = None
        if spec.url is not None:
            # Only here: a gateway without a resolver never imports the HTTP client
            # (gateway.resolve.breaker says why).
            from gateway.resolve.remote import RemoteResolver

            if spec.tls is not None and spec.tls.insecure:
                log.warning(
                    "resolver %s: TLS certificates are NOT verified (resolver.tls.insecure: "
                    "true); anyone on the path can answer for it",
                    spec.url,
                )
            remote = RemoteResolver(
                spec.url,
                timeout_s=spec.budget_ms / 1000,
                breaker=CircuitBreaker(spec.breaker_failures, spec.breaker_cooldown_s),
                cache=TTLCache(spec.cache_size, spec.cache_ttl_s),
                token=loaded.resolver_token,
                tls=loaded.resolver_tls,
            )
        catalog = Catalog.build(loaded.skills, loaded.policies)
        return cls(catalog, spec.max_options, remote)

    def query(self, failure: Failure, caller: Caller, situation: Situation) -> ResolveQuery | None:
        if failure.recovery_intent is None:
            return None
        return ResolveQuery(
            failure.category,
            failure.code,
            failure.recovery_intent,
            caller.scopes,
            situation.operation,
        )

    async def recover_within(
        self,
        budget_s: float,
        failure: Failure,
        caller: Caller,
        situation: Situation,
        request_id: str,
    ) -> Recovery:
        """`recover` within `resolver.budget_ms`; past it or on any error, none (docs/spec.md).

        The one place both the HTTP failure path and MCP upgrades resolve, so both count a
        timeout or an error as an outcome and observe the resolver's latency alike.
        """
        if failure.recovery_intent is None:
            return NO_RECOVERY
        begun = time.monotonic()
        try:
            async with self.budget(budget_s):
                return await self.recover(failure, caller, situation)
        except TimeoutError:
            _resolved(ResolverOutcome.TIMEOUT)
            log.warning("recovery resolution over budget request_id=%s", request_id)
        except Exception:
            _resolved(ResolverOutcome.ERROR)
            log.exception("recovery resolution failed request_id=%s", request_id)
        finally:
            RESOLVER_LATENCY.observe(time.monotonic() - begun)
        return NO_RECOVERY

    async def recover(self, failure: Failure, caller: Caller, situation: Situation) -> Recovery:
        query = self.query(failure, caller, situation)
        if query is None or self.max_options == 0:
            return NO_RECOVERY
        if self.remote is None:
            return self._local(query)
        try:
            wire = await self.remote.fetch(query, situation.route, situation.tool)
        except Unsendable as exc:
            _resolved(ResolverOutcome.UNSENDABLE)
            log.warning("no recovery options: %s", exc)
            return NO_RECOVERY
        except ResolverUnavailable as exc:
            outcome = (
                ResolverOutcome.CIRCUIT_OPEN
                if isinstance(exc, CircuitOpen)
                else (ResolverOutcome.ERROR)
            )
            _resolved(outcome)
            log.warning("remote resolver unavailable (%s); no recovery options", exc)
            return NO_RECOVERY
        options = tuple(
            RecoveryOption(rank, o.skill_name, o.skill_version, o.purpose, query.operation)
            for rank, o in enumerate(wire[: self.max_options], start=1)
        )
        return self._counted(Recovery(options))

    def replayed(self, failure: Failure, recovery: Recovery) -> None:
        """Count a kept local `recovery` for `failure` as `recover` counted it when it was
        resolved (the answer cache's hits; gateway/http/answer_cache.py): outcome and catalog
        gap."""
        intent = failure.recovery_intent
        if intent is None or self.max_options == 0 or self.remote is not None:
            return
        if self.catalog.lacks(intent):
            self.gaps.report(intent)
        self._counted(recovery)

    def _local(self, query: ResolveQuery) -> Recovery:
        if self.catalog.lacks(query.intent):
            self.gaps.report(query.intent)
        resolution = resolve_locally(self.catalog, query, self.max_options)
        return self._counted(Recovery(resolution.options))

    @staticmethod
    def _counted(recovery: Recovery) -> Recovery:
        outcome = ResolverOutcome.OPTIONS if recovery.available else ResolverOutcome.NONE
        _resolved(outcome)
        return recovery if recovery.available else NO_RECOVERY

    def budget(self, seconds: float) -> contextlib.AbstractAsyncContextManager[object]:
        """A timer of `seconds` around enrichment, armed only when resolution can await.

        Classification and local resolution never await, so a timer could not interrupt
        them; it would only cost its scheduling on every failure. Callers check the elapsed
        time afterwards, which enforces the budget in both cases.
        """
        return asyncio.timeout(seconds) if self.remote is not None else _NO_TIMER

    async def close(self) -> None:
        if self.remote is not None:
            await self.remote.close()


def _resolved(outcome: ResolverOutcome) -> None:
    """One resolution's outcome: counted, and on the request's span while tracing is on."""
    count_resolution(outcome)
    note_resolution(outcome.value)
