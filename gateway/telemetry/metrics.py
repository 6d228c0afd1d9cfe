"""Metrics: the only module that imports prometheus_client, and the one list of metric names.

Label values come from closed sets (categories, modes, outcomes, status classes, HTTP methods)
or from the config (route names, rule ids and codes, intents declared by rules), never from
request data, so the number of series is bounded by the config. Every metric here is
documented in docs/operations.md (Metrics).

With `serve --workers N` (gateway.serve.workers) each worker process runs with
`PROMETHEUS_MULTIPROC_DIR` set before this module is imported, so the metrics below write to
per-process files in that directory; the supervisor reads them all
(gateway.telemetry.multiprocess) and is the only process that serves /metrics. Gauges say how
they combine across workers (`multiprocess_mode`); in a single process that argument is
ignored and nothing costs more.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Literal, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.failure import Mode
from gateway.observers import Classified, FailureNotes

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
    UNSENDABLE = "unsendable"
    """The request did not fit the resolver's wire: not asked, not its failure."""


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
ANSWER_CACHE = Counter(
    "mendpoint_answer_cache_total",
    "Failures answered from the answer cache (hit) or enriched and kept for the next (miss)",
    ["result"],
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "mendpoint_fail_open_total",
    "Failures sent as the original upstream response, by reason",
    ["route", "reason"],
    registry=REGISTRY,
)
TRACES_KEPT = Counter(
    "mendpoint_traces_kept_failures_total",
    "Exchanges the head sampler dropped that failed: exported for their failure (kept), or "
    "dropped past telemetry.max_kept_failures_per_s (over_limit)",
    ["outcome"],
    registry=REGISTRY,
)
UPSTREAM_REPLAYS = Counter(
    "mendpoint_upstream_replays_total",
    "Requests sent once more on a fresh connection: a reused one had been closed by the "
    "upstream before any answer (docs/transparency.md)",
    registry=REGISTRY,
)
POOL_REFUSALS = Counter(
    "mendpoint_upstream_pool_refusals_total",
    "Requests answered 503 GATEWAY_UPSTREAM_LIMIT, never sent: no upstream connection came "
    "within the wait because the gateway's own limit was full (limit: route for "
    "routes[].max_connections, total for limits.max_upstream_connections)",
    ["route", "limit"],
    registry=REGISTRY,
)
UPSTREAM_STREAMS = Gauge(
    "mendpoint_upstream_streams",
    "Upstream connections carrying a stream right now, outside the request limits "
    "(at most limits.max_upstream_streams; docs/transparency.md)",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
TUNNELS_OPENED = Counter(
    "mendpoint_tunnels_opened_total",
    "WebSocket tunnels opened: the upstream answered the handshake 101 (docs/transparency.md)",
    ["route"],
    registry=REGISTRY,
)
TUNNELS_CLOSED = Counter(
    "mendpoint_tunnels_closed_total",
    "WebSocket tunnels closed, by reason: client_closed, upstream_closed, idle_timeout, cancelled",
    ["route", "reason"],
    registry=REGISTRY,
)
UNMATCHED = Counter(
    "mendpoint_unmatched_failures_total",
    "Failures only a shipped default rule matched (see /gaps for their signatures)",
    ["route", "status_class"],
    registry=REGISTRY,
)
FOLLOWUPS = Counter(
    "mendpoint_followups_total",
    "Failures by what the caller did next (gateway.feedback.followups.Outcome)",
    ["route", "code", "outcome"],
    registry=REGISTRY,
)
RECOVERY_SECONDS = Histogram(
    "mendpoint_recovery_seconds",
    "Time from a failure to the caller's first success on the same route, method and target",
    ["route", "code"],
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600),
    registry=REGISTRY,
)
FOLLOWUPS_EVICTED = Counter(
    "mendpoint_followups_evicted_total",
    "Open failures dropped unsettled because followups.max_tracked or max_bytes was reached",
    ["route"],
    registry=REGISTRY,
)
CAPTURE_DROPPED = Counter(
    "mendpoint_capture_dropped_total",
    "Captured failures lost to a route's capture bounds: an oldest file replaced at "
    "capture.max_files or max_bytes, or a failure not written (larger than max_bytes, or "
    "writes backed up)",
    ["route"],
    registry=REGISTRY,
)
STORE_UP = Gauge(
    "mendpoint_fleet_store_up",
    "1 while the fleet store (fleet.redis) answers; 0 while follow-ups and gaps are per process",
    registry=REGISTRY,
    multiprocess_mode="livemin",
)
STORE_DEGRADED = Counter(
    "mendpoint_fleet_store_degraded_total",
    "Times the fleet store stopped answering within fleet.timeout_ms and tracking fell back to "
    "per process",
    registry=REGISTRY,
)
STORE_DROPPED = Counter(
    "mendpoint_fleet_store_dropped_total",
    "Store writes dropped unsent because fleet.queue_max were already waiting for the store",
    registry=REGISTRY,
)
FLEET_REJECTED = Counter(
    "mendpoint_fleet_rejected_total",
    "What another replica or the fleet store sent that was not applied: an event, a tally "
    "field, a gap or a relay record not sealed with the fleet key, or of the wrong shape "
    "(docs/security.md#fleet-store)",
    ["what", "reason"],
    registry=REGISTRY,
)
ACCESS_LOG_DROPPED = Counter(
    "mendpoint_access_log_dropped_total",
    "Access lines dropped because the access log's queue was full (the writer fell behind)",
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
UNTRUSTED_IDENTITY = Counter(
    "mendpoint_untrusted_identity_headers_total",
    "Caller identity headers (callers.source: trusted_header) sent by a peer outside "
    "trusted_proxies and ignored: the caller was treated as anonymous",
    registry=REGISTRY,
)
IdentitySource = Literal["api_key", "trusted_header"]
AMBIGUOUS_IDENTITY = Counter(
    "mendpoint_ambiguous_identity_total",
    "Requests whose identity header came more than once (or, for a caller name, with a "
    "comma: two names combined), by callers.source: the caller was treated as anonymous",
    ["source"],
    registry=REGISTRY,
)
ADMIN_AUTH_FAILURES = Counter(
    "mendpoint_admin_auth_failures_total",
    "Admin requests (/metrics, /gaps, /followups) refused with 401 because admin_token_file "
    "is set, by reason (missing or wrong token)",
    ["reason"],
    registry=REGISTRY,
)
RESOLVER_AUTH_FAILURES = Counter(
    "mendpoint_resolver_auth_failures_total",
    "Requests `mendpoint resolver` refused with 401, by reason (missing or wrong token)",
    ["reason"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "mendpoint_in_flight_requests",
    "Client requests being handled right now",
    registry=REGISTRY,
    multiprocess_mode="livesum",  # across workers: the sum over the ones alive
)
READY_NAME = "mendpoint_ready"
READY_HELP = "1 while the gateway accepts traffic (config loaded, listeners bound, not draining)"
READY = Gauge(
    READY_NAME,
    READY_HELP,
    registry=REGISTRY,
    # Across workers the supervisor reports its own verdict instead (WorkerMetrics); in the
    # files, a worker that is not ready makes the minimum 0.
    multiprocess_mode="livemin",
)

for _outcome in ResolverOutcome:
    RESOLUTIONS.labels(outcome=_outcome.value)
for _result in ("success", "failure"):
    RELOADS.labels(result=_result)
_ANSWER_CACHE_RESULTS = {
    hit: ANSWER_CACHE.labels(result="hit" if hit else "miss") for hit in (True, False)
}
for _reason in ("missing", "wrong"):
    RESOLVER_AUTH_FAILURES.labels(reason=_reason)


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "OTHER"


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


def count_request(route: str, method: str, status: int) -> None:
    """`REQUESTS` for one finished request, through a cached child: `labels()` validates and
    takes a lock on every call, a measurable share of the success path (docs/performance.md).
    """
    _request_child(route, method_label(method), status_class(status)).inc()


def observe_upstream(route: str, seconds: float) -> None:
    """`UPSTREAM_LATENCY` for one response, through a cached child (see `count_request`)."""
    _latency_child(route).observe(seconds)


# Bounded: routes come from the config, methods and status classes from closed sets.
@functools.lru_cache(maxsize=4096)
def _request_child(route: str, method: str, status_class: str) -> Counter:
    return REQUESTS.labels(route=route, method=method, status_class=status_class)


def count_failure(route: str, category: str, code: str, rule: str, mode: str) -> None:
    """`FAILURES` for one classified failure, through a cached child (see `count_request`)."""
    _failure_child(route, category, code, rule, mode).inc()


def count_envelope(route: str, mode: str) -> None:
    """`ENVELOPES` for one upgraded failure response, through a cached child."""
    _envelope_child(route, mode).inc()


def count_unmatched(route: str, kind: str) -> None:
    """`UNMATCHED` for one failure only a shipped default matched, through a cached child."""
    _unmatched_child(route, kind).inc()


class FailureMetrics:
    """The failure path's counters, as a declared observer (gateway/observers.py):
    `mendpoint_failures_total` for every classified failure, `…_unmatched_failures_total`
    for those only a shipped default named, `…_envelopes_total` for the upgraded answers and
    `…_fail_open_total` for the answers that went out as they came."""

    def classified(self, event: Classified) -> None:
        failure = event.failure
        mode = event.mode.value
        count_failure(event.route, failure.category.value, failure.code, event.rule, mode)
        if event.is_default:
            kind = status_class(event.status) if event.status is not None else None
            count_unmatched(event.route, kind or ("transport" if event.transport else "mcp"))

    def upgraded(self, route: str, mode: Mode) -> None:
        count_envelope(route, mode.value)

    def fell_back(self, route: str, reason: str, notes: FailureNotes | None) -> None:
        FALLBACKS.labels(route=route, reason=reason).inc()


def count_resolution(outcome: ResolverOutcome) -> None:
    """`RESOLUTIONS` for one resolution outcome (a closed set), through a cached child."""
    _resolution_child(outcome).inc()


# Bounded: routes, codes and rules come from the config, categories and modes are closed sets.
@functools.lru_cache(maxsize=4096)
def _failure_child(route: str, category: str, code: str, rule: str, mode: str) -> Counter:
    return FAILURES.labels(route=route, category=category, code=code, rule=rule, mode=mode)


@functools.lru_cache(maxsize=1024)
def _envelope_child(route: str, mode: str) -> Counter:
    return ENVELOPES.labels(route=route, mode=mode)


# Bounded: routes come from the config, status classes from a closed set.
@functools.lru_cache(maxsize=1024)
def _unmatched_child(route: str, kind: str) -> Counter:
    return UNMATCHED.labels(route=route, status_class=kind)


@functools.lru_cache(maxsize=16)
def _resolution_child(outcome: ResolverOutcome) -> Counter:
    return RESOLUTIONS.labels(outcome=outcome.value)


_POOL_LIMITS = {"route_connections": "route", "upstream_connections": "total"}


def count_pool_refusal(route: str, refusal: str) -> None:
    """`POOL_REFUSALS` for one request the gateway's own upstream limit kept from being sent
    (`refusal`: gateway.failure.Refusal's route or upstream connections)."""
    _pool_refusal_child(route, _POOL_LIMITS[refusal]).inc()


# Bounded: routes come from the config, limits from a closed set.
@functools.lru_cache(maxsize=1024)
def _pool_refusal_child(route: str, limit: str) -> Counter:
    return POOL_REFUSALS.labels(route=route, limit=limit)


def count_answer_cache(hit: bool) -> None:
    """`ANSWER_CACHE`: one failure answered from the cache (`hit`) or looked up there in vain."""
    _ANSWER_CACHE_RESULTS[hit].inc()


def count_followup(route: str, code: str, outcome: str) -> None:
    """`FOLLOWUPS` for one settled failure, through a cached child (see `count_request`)."""
    _followup_child(route, code, outcome).inc()


# Bounded: routes and codes come from the config, outcomes from a closed set.
@functools.lru_cache(maxsize=4096)
def _followup_child(route: str, code: str, outcome: str) -> Counter:
    return FOLLOWUPS.labels(route=route, code=code, outcome=outcome)


@functools.lru_cache(maxsize=1024)
def _latency_child(route: str) -> Histogram:
    return UPSTREAM_LATENCY.labels(route=route)


def exposition() -> bytes:
    """The Prometheus text format of every Mendpoint metric."""
    return generate_latest(REGISTRY)


# --- what the console's window reads (gateway/serve/console/window.py) -----------------------

CounterSample = tuple[str, dict[str, str], float]
"""A sample's name, labels and value."""


class Collects(Protocol):
    def collect(self) -> Iterable[Metric]: ...


def samples_of(*collectors: Collects) -> Callable[[], Iterator[CounterSample]]:
    """Every sample of these collectors (this process's counters, or the supervisor's sum of
    its workers'), as plain tuples, read anew at each call."""

    def samples() -> Iterator[CounterSample]:
        for collector in collectors:
            for family in collector.collect():
                for sample in family.samples:
                    yield sample.name, sample.labels, sample.value

    return samples


def console_samples() -> Callable[[], Iterator[CounterSample]]:
    """The counters of this process the console's Routes and Agents pages read."""
    return samples_of(REQUESTS, FAILURES, ENVELOPES, FALLBACKS, FOLLOWUPS)
