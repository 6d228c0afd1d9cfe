"""A rule's regex search, bounded: the per-regex timeout and the classification's deadline.

Patterns are compiled once at load; the conditions that search a text (`conditions.py`:
headers, `json:` values, the body) all search through `timed_search` here, on input already
capped by the proxy, so a pathological pattern or body costs a bounded amount of time and
simply does not match.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from gateway.classify.observation import Observation
from gateway.config.patterns import LiteralPattern, Pattern, PrefilteredPattern

log = logging.getLogger("mendpoint.classify")

Captures = dict[str, str]

_NAMED_GROUP = re.compile(r"\(\?P?<(?![=!])")
"""How the `regex` module opens a named group: `(?P<name>` or `(?<name>` (`(?<=` and `(?<!`
are lookbehinds)."""


class ClassifyTimeout(TimeoutError):
    """The whole classification ran past its wall-clock deadline: the caller fails open."""


def timed_search(
    pattern: Pattern, text: str, timeout: float, rule_id: str, deadline: float, obs: Observation
) -> Any:
    """`pattern.search` under the per-regex timeout and the classification's deadline.

    The `regex` module's timeout counts process CPU time, not wall time: on a loaded host a
    50 ms timeout took over a second of wall time, and with many rules those add up while the
    event loop is blocked. So each search also gets at most what is left of the wall-clock
    deadline, and none starts once it has passed. A search that times out is marked on `obs`
    (`regex_gave_up`): the verdict is then not one an unhurried search gives, and the answer
    cache keeps none such.
    """
    if isinstance(pattern, LiteralPattern):
        # A substring test (most header tests) costs next to nothing: it neither needs a
        # timeout nor gives up a classification whose budget an earlier regex used up.
        return pattern.search(text)
    if isinstance(pattern, PrefilteredPattern) and not pattern.may_match(text):
        return None  # none of the words every match holds: it cannot match, nor time out
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ClassifyTimeout(f"classification deadline passed before rule {rule_id}")
    limit = min(timeout, remaining)
    try:
        searched = pattern.compiled if isinstance(pattern, PrefilteredPattern) else pattern
        return searched.search(text, timeout=limit)
    except TimeoutError:
        obs.regex_gave_up = True
        log.warning(
            "regex of rule %s timed out after %.0f ms; treated as no match", rule_id, limit * 1000
        )
        return None


def named(found: Any) -> Captures:
    """A match's named groups that took part in it."""
    return {k: v for k, v in found.groupdict().items() if v is not None}


def may_name_groups(pattern: str) -> bool:
    """False when `pattern` surely names no group, read from its text (compiling it would
    cost the start-up `compile_regex` defers): its matches need not be read for captures."""
    return _NAMED_GROUP.search(pattern) is not None


__all__ = ["Captures", "ClassifyTimeout", "may_name_groups", "named", "timed_search"]
