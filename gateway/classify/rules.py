"""One rule compiled: its index facts, its conditions, and its test against an `Observation`.

The index facts (`INDEX_KEYS`: what kind of failure, which statuses or transport faults,
the path's literal first segment) say which observations the rule is tried on; the engine
files the rule under them once (`engine.py`). Its conditions (`conditions.py`) are then
tested in order on each of those; a match returns the named captures that fill the rule's
templates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.classify.conditions import Condition, build_conditions
from gateway.classify.fields import FieldSource
from gateway.classify.observation import Observation, ObservationKind
from gateway.classify.retry_hints import HINT_HEADERS
from gateway.classify.timed_search import Captures
from gateway.config.loaded import SourcedRule
from gateway.config.patterns import parse_status
from gateway.config.rule_model import ErrorSpec, MatchSpec, RetryAfterSpec
from gateway.failure import TransportKind

INDEX_KEYS = frozenset({"status", "transport", "mcp", "mcp.is_error", "path"})
"""The `match:` keys that decide which observations a rule is tried on (`path` through its
literal first segment; its glob is a condition too). Every other key is a condition."""


@dataclass(frozen=True, slots=True)
class CompiledRule:
    id: str
    order: int
    is_default: bool
    origin: str
    error: ErrorSpec
    tried_on: frozenset[ObservationKind]
    """The kinds of observation the rule is tried on (`match.transport`, `match.mcp` and its
    `is_error`, narrowed by conditions that hold on some kinds only)."""
    statuses: tuple[tuple[int, int], ...] | None
    transports: frozenset[TransportKind] | None
    path_segment: str | None  # the glob's literal first segment, for the engine's index
    conditions: tuple[Condition, ...] = ()
    fields: tuple[FieldSource, ...] = ()

    @property
    def unconditional(self) -> bool:
        """True when status/transport alone decide: no rule after it can ever be reached."""
        return not self.conditions

    @property
    def headers_read(self) -> tuple[str, ...]:
        """Every response header this rule's match or failure may read (for the answer cache)."""
        names = [name for condition in self.conditions for name in condition.headers_read]
        retry = self.error.retry_after_ms
        if isinstance(retry, RetryAfterSpec):
            names.extend(n for n in (retry.header,) if n is not None)
            names.extend(HINT_HEADERS if retry.hints else ())
        return tuple(names)

    def matches(
        self, obs: Observation, regex_timeout_s: float, deadline: float = math.inf
    ) -> Captures | None:
        """Named captures when every condition holds, else None (`deadline`: see
        `timed_search`); a later condition's capture wins over an earlier one's."""
        captures: Captures | None = None
        for condition in self.conditions:
            found = condition.test(obs, regex_timeout_s, deadline)
            if found is None:
                return None
            if found:
                if captures is None:
                    captures = dict(found)
                else:
                    captures.update(found)
        return {} if captures is None else captures


def compile_rule(sourced: SourcedRule, order: int) -> CompiledRule:
    """Compile a validated rule; validation has already proven every pattern compiles."""
    spec, match = sourced.spec, sourced.spec.match
    conditions = build_conditions(match, spec.id)
    tried_on = _kinds(match)
    for condition in conditions:
        if condition.only_on is not None:
            tried_on &= condition.only_on
    return CompiledRule(
        id=spec.id,
        order=order,
        is_default=sourced.is_default,
        origin=f"{sourced.source.file}:{sourced.source.line}",
        error=spec.error,
        tried_on=tried_on,
        statuses=tuple(parse_status(s) for s in match.status) if match.status else None,
        transports=frozenset(match.transport) if match.transport is not None else None,
        path_segment=literal_first_segment(match.path),
        conditions=conditions,
        fields=tuple(FieldSource.compile(f) for f in spec.error.fields_specs),
    )


def _kinds(match: MatchSpec) -> frozenset[ObservationKind]:
    """What `match.transport` and `match.mcp` say the rule is for (validation allows at most
    one of them): a transport fault, an MCP failure, a reported success, else a status."""
    if match.transport is not None:
        return frozenset({ObservationKind.TRANSPORT})
    if match.mcp is None:
        return frozenset({ObservationKind.STATUS})
    if match.mcp.is_error:
        return frozenset({ObservationKind.JSONRPC_ERROR, ObservationKind.TOOL_ERROR})
    return frozenset({ObservationKind.REPORTED_SUCCESS})


def literal_first_segment(glob: str | None) -> str | None:
    """`/v1/orders/**` → `v1`: every path the glob matches starts with `/v1/` or is `/v1`.

    None when the first segment holds a wildcard (or there is no glob): such a rule can
    match under any first segment.
    """
    if glob is None or not glob.startswith("/"):
        return None
    segment = glob[1:].partition("/")[0]
    if not segment or "*" in segment or "?" in segment:
        return None
    return segment


__all__ = ["INDEX_KEYS", "CompiledRule", "compile_rule", "literal_first_segment"]
