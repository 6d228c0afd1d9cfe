"""The charts' last hour, minute by minute, from the readings the console already keeps.

`RecentCounts.minutes()` gives a reading of the counters about a minute apart for the last
hour, and one taken now; each consecutive pair is a minute (the last, under way). Routes
charts each minute's requests, failures by code and share upgraded (as the Routes table
counts them: gateway.serve.console.window.by_route); Agents charts each minute's recovery
rate per route and code, from `mendpoint_followups_total`: the failures whose advice worked
(`recovered`, `retried_as_advised`, as docs/operations.md#follow-ups reads them) per failure
settled that minute. Nothing is
counted that /metrics does not export, and nothing is added to the request path.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

from gateway.feedback.followups import Outcome

from .window import FOLLOWUPS, Reading, RouteFigures, Series, by_route, difference

RECOVERED = frozenset({Outcome.RECOVERED.value, Outcome.RETRIED_AS_ADVISED.value})
"""The advice worked: a different follow-up succeeded, or a retry of a retryable failure
waited as advised."""


@dataclass(frozen=True, slots=True)
class Settled:
    """One route and code's failures settled in a minute, and how many recovered."""

    settled: int
    recovered: int

    @property
    def rate(self) -> float | None:
        return None if self.settled == 0 else self.recovered / self.settled


@dataclass(frozen=True, slots=True)
class Hour:
    """Minute by minute, oldest first; `ends_s_ago[i]` is when minute i ended."""

    ends_s_ago: tuple[float, ...]
    routes: dict[str, tuple[RouteFigures, ...]]
    codes: dict[tuple[str, str], tuple[Settled, ...]]

    @property
    def span_s(self) -> float:
        return 0.0 if not self.ends_s_ago else self.ends_s_ago[0] + 60.0


EMPTY = RouteFigures(0, (), 0, ())
NOTHING = Settled(0, 0)


def hour(readings: list[tuple[float, Reading]]) -> Hour:
    """The minutes between consecutive `readings` (the last is now)."""
    if len(readings) < 2:
        return Hour((), {}, {})
    now = readings[-1][0]
    deltas = [difference(current, base) for (_, base), (_, current) in pairwise(readings)]
    ends = tuple(max(0.0, now - at) for at, _ in readings[1:])
    per_minute = [by_route(delta) for delta in deltas]
    names = sorted({name for minute in per_minute for name in minute})
    routes = {name: tuple(minute.get(name, EMPTY) for minute in per_minute) for name in names}
    settled = [_settled(delta) for delta in deltas]
    keys = sorted({key for minute in settled for key in minute})
    codes = {key: tuple(minute.get(key, NOTHING) for minute in settled) for key in keys}
    return Hour(ends, routes, codes)


def _settled(delta: Counter[Series]) -> dict[tuple[str, str], Settled]:
    totals: Counter[tuple[str, str]] = Counter()
    recovered: Counter[tuple[str, str]] = Counter()
    for (name, pairs), count in delta.items():
        if name != FOLLOWUPS or not count:
            continue
        labels = dict(pairs)
        key = (labels.get("route", "-"), labels.get("code", "?"))
        totals[key] += count
        if labels.get("outcome") in RECOVERED:
            recovered[key] += count
    return {key: Settled(n, recovered[key]) for key, n in totals.items()}
