"""Why a rule did not match a sample: for `explain` and the console's "Try a rule" page.

Each condition of a rule is tested alone, by the rule's own `matches` on a copy of the rule
that keeps that one condition and drops the others, so the reason given is the matcher's own
answer and never a second reading of the rules (docs/rules.md#debugging-a-rule-explain).
Offline only: it tries every condition of every candidate, which the data path never does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gateway.classify.engine import Classifier
from gateway.classify.observation import Observation
from gateway.classify.rules import CompiledRule

# Each condition and what a copy of the rule holds instead, to leave it out.
_ABSENT: dict[str, Any] = {
    "routes": None,
    "methods": None,
    "path": None,
    "tool": None,
    "jsonrpc_code": None,
    "idempotent": None,
    "missing_required": None,
    "headers": (),
    "json": (),
    "body": None,
}


@dataclass(frozen=True, slots=True)
class PassedOver:
    """A rule the sample was tried against, in declared order, and why it was not chosen."""

    rule: str
    origin: str
    reasons: tuple[str, ...]


def passed_over(
    classifier: Classifier, obs: Observation, chosen: CompiledRule | None
) -> tuple[tuple[PassedOver, ...], int]:
    """The candidate rules (same status or fault, same path segment) other than `chosen`,
    each with its failing conditions, and how many rules were never candidates at all."""
    candidates = classifier.candidates(obs)
    found: list[PassedOver] = []
    after = False
    for rule in candidates:
        if rule is chosen:
            after = True
            continue
        if after:
            reasons: tuple[str, ...] = (f"not tried: {chosen.id if chosen else ''} matched first",)
        else:
            reasons = _failing(rule, obs, classifier.regex_timeout_s)
        found.append(PassedOver(rule.id, rule.origin, reasons))
    return tuple(found), len(classifier.rules) - len(candidates)


def _failing(rule: CompiledRule, obs: Observation, timeout: float) -> tuple[str, ...]:
    reasons = []
    bare = replace(rule, **_ABSENT)
    for name in _ABSENT:
        if getattr(rule, name) == _ABSENT[name]:
            continue
        if name == "headers":
            for header in rule.headers:
                if replace(bare, headers=(header,)).matches(obs, timeout, math.inf) is None:
                    reasons.append(f"header {header[0]} is absent or does not match")
            continue
        if name == "json":
            for condition in rule.json:
                if replace(bare, json=(condition,)).matches(obs, timeout, math.inf) is None:
                    reasons.append(f"json {condition.path.text}: no value there matches")
            continue
        if replace(bare, **{name: getattr(rule, name)}).matches(obs, timeout, math.inf) is None:
            reasons.append(_reason(name, rule, obs))
    return tuple(reasons) or ("matched, but an earlier rule did",)


def _reason(name: str, rule: CompiledRule, obs: Observation) -> str:
    if name == "routes":
        return f"route {obs.route} is not one of {', '.join(sorted(rule.routes or ()))}"
    if name == "methods":
        return f"method {obs.method} is not one of {', '.join(sorted(rule.methods or ()))}"
    if name == "path":
        return f"path {obs.path} does not match its glob"
    if name == "idempotent":
        return f"the request is {'' if obs.replay_safe else 'not '}safe to replay"
    if name == "missing_required":
        left_out = "left out" if obs.missing_arguments else "did not leave out"
        return f"the call {left_out} a required argument"
    if name == "body":
        return "the body does not match its pattern"
    return f"{name} does not match"
