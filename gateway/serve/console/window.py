"""The Routes page's figures over the last minutes, from the gateway's own counters.

Nothing is added to the request path: every `TICK_S` the admin side reads the counters
/metrics already exports (requests, failures by code, fallbacks, upgraded answers, follow-up
outcomes) and keeps the readings of the last `WINDOW_S`; a page shows the difference between
now and the oldest reading kept. One reading a minute is kept for the last hour too, the
charts' (gateway.serve.console.timeline). A reading holds one number per series, so memory is
the counters' own label sets times the readings kept (31 and 61). Under `--workers` the
supervisor reads the workers' summed files the same way (docs/operations.md#console).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.telemetry.metrics import CounterSample

WINDOW_S = 300.0
TICK_S = 10.0
REQUESTS = "mendpoint_requests_total"
FAILURES = "mendpoint_failures_total"
UPGRADED = "mendpoint_envelopes_total"
FALLBACKS = "mendpoint_fail_open_total"
FOLLOWUPS = "mendpoint_followups_total"
READ = frozenset({REQUESTS, FAILURES, UPGRADED, FALLBACKS, FOLLOWUPS})
MINUTE_S = 60.0
HISTORY_MINUTES = 60
"""The charts' span: a reading kept a minute apart, for the last hour (61 readings)."""
UPGRADED_MODES = frozenset({"additive", "envelope"})
"""The body carries the advice; `headers` is shadow mode, as the Grafana dashboard's "Share
of failures delivered upgraded" counts it."""

Samples = Callable[[], Iterable[CounterSample]]
"""The counters to read (`observe.console_samples`, or the supervisor's sum of workers')."""
Series = tuple[str, tuple[tuple[str, str], ...]]
Reading = dict[Series, float]


@dataclass(frozen=True, slots=True)
class RouteFigures:
    """One route's counts over the span."""

    requests: int
    failures: tuple[tuple[str, int], ...]
    """Per code, most frequent first."""
    upgraded: int
    fallbacks: tuple[tuple[str, int], ...]
    """Per reason: failures sent as the original response instead."""

    @property
    def failed(self) -> int:
        return sum(n for _, n in self.failures)

    @property
    def upgraded_share(self) -> float | None:
        """Answers with the advice in the body per classified failure (shadow mode, a rollout
        below 100 % and bodies too large to rewrite lower it)."""
        return None if self.failed == 0 else min(1.0, self.upgraded / self.failed)


@dataclass(frozen=True, slots=True)
class Recent:
    span_s: float
    routes: dict[str, RouteFigures]


class RecentCounts:
    """Readings of the counters, the last `window_s` of them."""

    def __init__(
        self,
        samples: Samples,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._samples = samples
        self._window_s = window_s
        self._clock = clock
        self._readings: deque[tuple[float, Reading]] = deque()
        self._minutes: deque[tuple[float, Reading]] = deque(maxlen=HISTORY_MINUTES + 1)
        self.tick()

    def tick(self) -> None:
        now = self._clock()
        reading = self._read()
        self._readings.append((now, reading))
        if not self._minutes or now - self._minutes[-1][0] >= MINUTE_S:
            self._minutes.append((now, reading))
        while self._readings and self._readings[0][0] < now - self._window_s:
            self._readings.popleft()

    async def run(self, tick_s: float = TICK_S) -> None:
        """Read every `tick_s` until cancelled (the admin app's lifetime), in a thread: the
        counters take their own locks, and the event loop serving requests beside the admin
        app is held for a switch interval at a time, not for the whole reading."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(tick_s)
            await loop.run_in_executor(None, self.tick)

    def recent(self) -> Recent:
        """Counts since the oldest reading kept (at most `window_s` ago)."""
        now, current = self._clock(), self._read()
        since, base = self._readings[0] if self._readings else (now, current)
        delta = difference(current, base)
        return Recent(max(0.0, now - since), by_route(delta))

    def minutes(self) -> list[tuple[float, Reading]]:
        """The readings a minute apart (the last hour's), and one now: consecutive pairs are
        the charts' minutes, the last one under way (gateway.serve.console.timeline)."""
        return [*self._minutes, (self._clock(), self._read())]

    def _read(self) -> Reading:
        reading: Reading = {}
        for name, labels, value in self._samples():
            if name in READ:
                # A metric's samples list its labels in one order: no need to sort them.
                reading[(name, tuple(labels.items()))] = value
        return reading


def difference(current: Reading, base: Reading) -> Counter[Series]:
    """What each series counted from `base` to `current`."""
    delta: Counter[Series] = Counter()
    for series, value in current.items():
        # A counter never goes back; a smaller value is a series that was reset.
        delta[series] = int(max(0.0, value - base.get(series, 0.0)))
    return delta


def by_route(delta: Counter[Series]) -> dict[str, RouteFigures]:
    requests: Counter[str] = Counter()
    upgraded: Counter[str] = Counter()
    failures: dict[str, Counter[str]] = {}
    fallbacks: dict[str, Counter[str]] = {}
    for (name, pairs), count in delta.items():
        labels = dict(pairs)
        route = labels.get("route", "-")
        if name == REQUESTS:
            requests[route] += count
        elif name == UPGRADED and labels.get("mode") in UPGRADED_MODES:
            upgraded[route] += count
        elif name == FAILURES:
            failures.setdefault(route, Counter())[labels.get("code", "?")] += count
        elif name == FALLBACKS:
            fallbacks.setdefault(route, Counter())[labels.get("reason", "?")] += count
    names = set(requests) | set(upgraded) | set(failures) | set(fallbacks)
    return {
        route: RouteFigures(
            requests=requests[route],
            failures=_ranked(failures.get(route)),
            upgraded=upgraded[route],
            fallbacks=_ranked(fallbacks.get(route)),
        )
        for route in names
    }


def _ranked(counts: Counter[str] | None) -> tuple[tuple[str, int], ...]:
    if counts is None:
        return ()
    return tuple(sorted(((k, n) for k, n in counts.items() if n), key=lambda kv: (-kv[1], kv[0])))
