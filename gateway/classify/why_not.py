"""Why a rule did not match a sample: for `explain` and the console's "Try a rule" page.

Each condition of a rule (`conditions.py`) is tested alone, by the very test the rule's
`matches` runs, and the ones that fail give their own reasons, so the reason given is the
matcher's own answer and never a second reading of the rules
(docs/rules.md#debugging-a-rule-explain). Offline only: it tries every condition of every
candidate, which the data path never does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.classify.engine import Classifier
from gateway.classify.observation import Observation
from gateway.classify.rules import CompiledRule


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
    reasons = tuple(
        condition.reason(obs)
        for condition in rule.conditions
        if condition.test(obs, timeout, math.inf) is None
    )
    return reasons or ("matched, but an earlier rule did",)
