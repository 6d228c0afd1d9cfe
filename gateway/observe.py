"""Metrics and rate-limited event logs: the only module that imports prometheus_client.

Label values come from closed sets (categories, outcomes) or from the config (intents declared
by rules), never from request data, so cardinality is bounded by the config.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger("mendpoint.resolve")

REGISTRY = CollectorRegistry(auto_describe=True)

CATALOG_GAPS = Counter(
    "mendpoint_resolver_catalog_gap_total",
    "Failures whose recovery intent no skill in the catalog declares",
    ["intent"],
    registry=REGISTRY,
)
RESOLUTIONS = Counter(
    "mendpoint_resolver_outcomes_total",
    "Recovery resolutions by outcome",
    ["outcome"],
    registry=REGISTRY,
)


MAX_GAP_INTENTS = 500


class GapReporter:
    """Counts every catalog gap and logs each intent at most once per `interval_s`.

    At most `MAX_GAP_INTENTS` distinct intents get their own label; the rest share "other",
    so a resolver server fed arbitrary intents cannot grow the metric without bound.
    """

    def __init__(self, interval_s: float = 300.0) -> None:
        self._interval_s = interval_s
        self._last_logged: dict[str, float] = {}

    def report(self, intent: str) -> None:
        if intent not in self._last_logged and len(self._last_logged) >= MAX_GAP_INTENTS:
            CATALOG_GAPS.labels(intent="other").inc()
            return
        CATALOG_GAPS.labels(intent=intent).inc()
        now = time.monotonic()
        last = self._last_logged.get(intent)
        if last is None or now - last >= self._interval_s:
            self._last_logged[intent] = now
            log.warning("catalog gap: no skill declares recovery intent %r", intent)
