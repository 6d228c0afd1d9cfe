"""Metrics: the only module that imports prometheus_client, and the one list of metric names.

Label values come from closed sets (categories, modes, outcomes, status classes, HTTP methods)
or from the config (route names, rule ids and codes, intents declared by rules), never from
request data, so the number of series is bounded by the config. Every metric here is
documented in the README's Metrics section.
"""

from __future__ import annotations

import functools
import logging
import time
from enum import StrEnum

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("mendpoint.resolve")

# `_created` series double the output and no dashboard uses them. (The library does not
# annotate this function; the ignore covers only that missing annotation.)
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry(auto_describe=True)
METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST

KNOWN_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
RESOLVER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


class FallbackReason(StrEnum):
    """Why the original upstream response went out instead of an upgraded one."""

    EXCEPTION = "exception"
    ENRICH_BUDGET = "enrich_budget"
    BODY_TOO_LARGE = "body_too_large"


class ResolverOutcome(StrEnum):
    OPTIONS = "options"
    NONE = "none"
    TIMEOUT = "timeout"
    ERROR = "error"
    CIRCUIT_OPEN = "circuit_open"


REQUESTS = Counter(
    "mendpoint_requests_total",
    "Client requests by route, method and response status class",
    ["route", "method", "status_class"],
    registry=REGISTRY,
)
UPSTREAM_LATENCY = Histogram(
    "mendpoint_upstream_latency_seconds",
    "Time from sending the request upstream to receiving its response headers",
    ["route"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
FAILURES = Counter(
    "mendpoint_failures_total",
    "Failures classified, in every mode (original included: shadow traffic counts)",
    ["route", "category", "code", "rule", "mode"],
    registry=REGISTRY,
)
ENVELOPES = Counter(
    "mendpoint_envelopes_total",
    "Failure responses delivered upgraded (headers added or body rewritten), by mode",
    ["route", "mode"],
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "mendpoint_fail_open_total",
    "Failures sent as the original upstream response, by reason",
    ["route", "reason"],
    registry=REGISTRY,
)
UNMATCHED = Counter(
    "mendpoint_unmatched_failures_total",
    "Failures only a shipped default rule matched (see /gaps for their signatures)",
    ["route", "status_class"],
    registry=REGISTRY,
)
RESOLVER_LATENCY = Histogram(
    "mendpoint_resolver_latency_seconds",
    "Time spent resolving recovery options",
    buckets=RESOLVER_BUCKETS,
    registry=REGISTRY,
)
RESOLUTIONS = Counter(
    "mendpoint_resolver_outcomes_total",
    "Recovery resolutions by outcome",
    ["outcome"],
    registry=REGISTRY,
)
CATALOG_GAPS = Counter(
    "mendpoint_resolver_catalog_gap_total",
    "Failures whose recovery intent no skill in the catalog declares",
    ["intent"],
    registry=REGISTRY,
)
RELOADS = Counter(
    "mendpoint_config_reloads_total",
    "Config reloads by result",
    ["result"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "mendpoint_in_flight_requests",
    "Client requests being handled right now",
    registry=REGISTRY,
)
READY = Gauge(
    "mendpoint_ready",
    "1 while the gateway accepts traffic (config loaded, listeners bound, not draining)",
    registry=REGISTRY,
)

for _outcome in ResolverOutcome:
    RESOLUTIONS.labels(outcome=_outcome.value)
for _result in ("success", "failure"):
    RELOADS.labels(result=_result)


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "OTHER"


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


def count_request(route: str, method: str, status: int) -> None:
    """`REQUESTS` for one finished request, through a cached child: `labels()` validates and
    takes a lock on every call, a measurable share of the success path (README, Performance).
    """
    _request_child(route, method_label(method), status_class(status)).inc()


def observe_upstream(route: str, seconds: float) -> None:
    """`UPSTREAM_LATENCY` for one response, through a cached child (see `count_request`)."""
    _latency_child(route).observe(seconds)


# Bounded: routes come from the config, methods and status classes from closed sets.
@functools.lru_cache(maxsize=4096)
def _request_child(route: str, method: str, status_class: str) -> Counter:
    return REQUESTS.labels(route=route, method=method, status_class=status_class)


@functools.lru_cache(maxsize=1024)
def _latency_child(route: str) -> Histogram:
    return UPSTREAM_LATENCY.labels(route=route)


def exposition() -> bytes:
    """The Prometheus text format of every Mendpoint metric."""
    return generate_latest(REGISTRY)


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
