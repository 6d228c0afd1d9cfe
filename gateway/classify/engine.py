"""The classifier: finds the first matching rule and turns it into a `Failure`.

Rules are indexed by the kind of failure they are tried on (`CompiledRule.tried_on`), then by
upstream status or transport fault, and within a status by the literal first segment of their
path glob, so classifying one error scans only the rules that could apply to it, in their
declared order: the cost does not grow with rules written for other statuses or other APIs
(`/billing/**` rules are never tried on `/v1/...`). An observation's kind picks its index in
one dict lookup (`candidates`); rules that share the status and first segment are still tried
one by one. The success path asks `has_rules_for(status)`, a dict lookup, and never touches
the rules.
"""

from __future__ import annotations

import operator
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.classify.observation import Observation, ObservationKind
from gateway.classify.own_failures import refusal_rules, route_connection_rules
from gateway.classify.rules import CompiledRule, compile_rule
from gateway.classify.templates import build_failure
from gateway.config.jsonpath import parse_json_path
from gateway.config.loaded import LoadedConfig
from gateway.failure import Failure, Refusal, TransportKind

FIRST_FAILURE_STATUS = 400
RETRY_AFTER = "Retry-After"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A failure and the rule that produced it."""

    failure: Failure
    rule: CompiledRule
    captures: Mapping[str, str] = field(default_factory=dict)
    """The rule's named captures: a retry delay counted down to an instant is worked out
    again from them per request (`render_failure.retry_delay_ms`; the answer cache)."""


class Classifier:
    """Compiled, indexed rules of one loaded config; immutable and safe to share."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.rules = tuple(compile_rule(r, i) for i, r in enumerate(loaded.rules))
        self.commands = {cid: c.spec.run for cid, c in loaded.commands.items()}
        config = loaded.config
        self.message_paths = tuple(
            parse_json_path(p) for p in (*config.extra_message_paths, *config.message_paths)
        )
        self.regex_timeout_s = loaded.config.limits.regex_timeout_ms / 1000
        self.budget_s = loaded.config.enrich_budget_ms / 1000
        self._by_status = _index_statuses(self.rules)
        # Results reported as successes meet only the rules written for them (opt-in).
        self._mcp_success = self._tried_on(ObservationKind.REPORTED_SUCCESS)
        self._indexes: dict[ObservationKind, _Index] = {
            ObservationKind.STATUS: _ByStatus(self._by_status),
            ObservationKind.TRANSPORT: _ByTransport(_index_transports(self.rules)),
            ObservationKind.REFUSAL: _Refusals(
                refusal_rules(config.limits), route_connection_rules(config.routes, config.limits)
            ),
            ObservationKind.JSONRPC_ERROR: _Fixed(self._tried_on(ObservationKind.JSONRPC_ERROR)),
            ObservationKind.TOOL_ERROR: _Fixed(self._tried_on(ObservationKind.TOOL_ERROR)),
            ObservationKind.REPORTED_SUCCESS: _Fixed(self._mcp_success),
        }
        self.headers_read = tuple(
            sorted({RETRY_AFTER, *(n for r in self.rules for n in r.headers_read)})
        )
        """Every response header a verdict or its rendering may depend on: the rules' header
        tests, their retry-delay sources and `Retry-After` (whose presence the rendering
        reads). The answer cache keys on these and on nothing else of the headers."""

    @property
    def reads_successes(self) -> bool:
        """Some rule reads MCP results reported as successes: the relays must parse them."""
        return bool(self._mcp_success)

    def has_rules_for(self, status: int) -> bool:
        """True when a response with this status must be inspected (the hot-path check)."""
        return status in self._by_status

    def candidates(self, obs: Observation) -> tuple[CompiledRule, ...]:
        """The rules that may match `obs`, in declared order: its kind's index, asked once."""
        return self._indexes[obs.kind].select(obs)

    def _tried_on(self, kind: ObservationKind) -> tuple[CompiledRule, ...]:
        return tuple(r for r in self.rules if kind in r.tried_on)

    def classify(self, obs: Observation, deadline: float | None = None) -> Verdict | None:
        """The first matching rule's failure, or None when no rule matches.

        Regex work stops at `deadline` (a `time.monotonic()` instant; by default the
        config's `enrich_budget_ms` from now) by raising `ClassifyTimeout`, so a data path
        that fails open on timeouts never blocks the event loop longer than its budget.
        Offline tools pass `math.inf`.
        """
        if deadline is None:
            deadline = time.monotonic() + self.budget_s
        for rule in self.candidates(obs):
            captures = rule.matches(obs, self.regex_timeout_s, deadline)
            if captures is not None:
                failure = build_failure(rule, obs, captures, self.commands, self.message_paths)
                return Verdict(failure, rule, captures)
        return None


class _Index(Protocol):
    """The rules tried on one kind of observation."""

    def select(self, obs: Observation) -> tuple[CompiledRule, ...]: ...


class _Fixed:
    """MCP failures: the same rules whatever the observation (their conditions decide)."""

    __slots__ = ("rules",)

    def __init__(self, rules: tuple[CompiledRule, ...]) -> None:
        self.rules = rules

    def select(self, obs: Observation) -> tuple[CompiledRule, ...]:
        return self.rules


class _ByStatus:
    __slots__ = ("by_status",)

    def __init__(self, by_status: dict[int, PathIndex]) -> None:
        self.by_status = by_status

    def select(self, obs: Observation) -> tuple[CompiledRule, ...]:
        index = None if obs.status is None else self.by_status.get(obs.status)
        return () if index is None else index.for_path(obs.path)


class _ByTransport:
    __slots__ = ("by_kind",)

    def __init__(self, by_kind: dict[TransportKind, tuple[CompiledRule, ...]]) -> None:
        self.by_kind = by_kind

    def select(self, obs: Observation) -> tuple[CompiledRule, ...]:
        return () if obs.transport is None else self.by_kind.get(obs.transport, ())


class _Refusals:
    """The gateway's own answers: each refusal's built-in rule, a route's own for its
    connection cap (`own_failures.py`)."""

    __slots__ = ("by_refusal", "by_route")

    def __init__(
        self, by_refusal: dict[Refusal, CompiledRule], by_route: dict[str, CompiledRule]
    ) -> None:
        self.by_refusal = {refusal: (rule,) for refusal, rule in by_refusal.items()}
        self.by_route = {route: (rule,) for route, rule in by_route.items()}

    def select(self, obs: Observation) -> tuple[CompiledRule, ...]:
        if obs.refusal is None:
            return ()
        if obs.refusal is Refusal.ROUTE_CONNECTIONS and obs.route in self.by_route:
            return self.by_route[obs.route]
        return self.by_refusal[obs.refusal]


class PathIndex:
    """One status's rules, narrowed by the request path's first segment.

    `by_segment[s]` holds, in declared order, the rules whose glob starts with the literal
    segment `s` together with the rules that can match under any segment; a path whose
    first segment no rule names gets only the latter (`generic`).
    """

    __slots__ = ("by_segment", "generic")

    def __init__(self, bucket: list[CompiledRule]) -> None:
        self.generic = tuple(r for r in bucket if r.path_segment is None)
        groups: dict[str, list[CompiledRule]] = defaultdict(list)
        for rule in bucket:
            if rule.path_segment is not None:
                groups[rule.path_segment].append(rule)
        by_order = operator.attrgetter("order")
        self.by_segment = {
            s: tuple(sorted((*group, *self.generic), key=by_order)) for s, group in groups.items()
        }

    def for_path(self, path: str) -> tuple[CompiledRule, ...]:
        if not self.by_segment:
            return self.generic
        segment = path[1:].partition("/")[0] if path.startswith("/") else None
        return self.by_segment.get(segment, self.generic) if segment else self.generic


def _index_statuses(rules: tuple[CompiledRule, ...]) -> dict[int, PathIndex]:
    buckets: dict[int, list[CompiledRule]] = defaultdict(list)
    for rule in rules:
        if ObservationKind.STATUS not in rule.tried_on:
            continue
        ranges = rule.statuses or ((FIRST_FAILURE_STATUS, 599),)
        for low, high in ranges:
            for status in range(low, high + 1):
                _append(buckets[status], rule)
    shared: dict[tuple[int, ...], PathIndex] = {}  # statuses with the same rules share one
    out: dict[int, PathIndex] = {}
    for status, bucket in buckets.items():
        key = tuple(r.order for r in bucket)
        index = shared.get(key)
        if index is None:
            index = shared[key] = PathIndex(bucket)
        out[status] = index
    return out


def _index_transports(
    rules: tuple[CompiledRule, ...],
) -> dict[TransportKind, tuple[CompiledRule, ...]]:
    buckets: dict[TransportKind, list[CompiledRule]] = defaultdict(list)
    for rule in rules:
        for kind in rule.transports or ():
            _append(buckets[kind], rule)
    return {kind: tuple(bucket) for kind, bucket in buckets.items()}


def _append(bucket: list[CompiledRule], rule: CompiledRule) -> None:
    """Add in order, skipping duplicates and anything shadowed by an unconditional rule."""
    if bucket and (bucket[-1] is rule or bucket[-1].unconditional):
        return
    bucket.append(rule)
