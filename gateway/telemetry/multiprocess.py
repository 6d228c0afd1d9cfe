"""Metrics under `serve --workers N`: the supervisor's view of every worker's files.

Each worker writes its metrics to per-process files in `PROMETHEUS_MULTIPROC_DIR`
(gateway.serve.workers sets it before `gateway.telemetry.metrics` is imported); the supervisor
reads them all and is the only process that serves /metrics. A retired worker's counters are
folded into an archive so totals never go down.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
from collections.abc import Callable, Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from gateway.telemetry.metrics import READY_HELP, READY_NAME

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
WORKER_STATES = ("configured", "running", "ready")


class SupervisorMetrics:
    """The supervisor's own metrics, made only in the supervisor: created at import, a
    worker would write them to its files too, and /metrics would show them twice."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.restarts = Counter(
            "mendpoint_worker_restarts_total",
            "Worker processes started again after one exited unexpectedly",
            registry=self.registry,
        )
        self.workers = Gauge(
            "mendpoint_workers",
            "Worker processes: configured, running (process alive) and ready (serving)",
            ["state"],
            registry=self.registry,
        )
        for state in WORKER_STATES:
            self.workers.labels(state=state)


class WorkerMetrics:
    """A collector for the supervisor: every worker's metrics, summed, plus its own.

    Counters and histograms add up over every worker that ever ran (an exited worker's files
    are folded into an archive, `retire_worker`), so restarts never make a counter go back.
    `mendpoint_ready` is not read from the files: it is the supervisor's verdict (every worker
    ready, not draining), the same one /readyz gives.
    """

    def __init__(self, path: str, ready: Callable[[], bool], own: SupervisorMetrics) -> None:
        self._path = path
        self._ready = ready
        self._own = own

    def collect(self) -> Iterable[Metric]:
        for metric in sorted(merged(self._path, "*"), key=lambda m: m.name):
            if metric.name != READY_NAME:
                yield metric
        yield GaugeMetricFamily(READY_NAME, READY_HELP, value=1.0 if self._ready() else 0.0)
        yield from self._own.registry.collect()


class WorkerCounters:
    """The workers' counters alone, summed as /metrics sums them (retired workers' archive
    included): what the console's Routes page reads every few seconds, without parsing
    every histogram's and gauge's file (docs/operations.md#console)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def collect(self) -> Iterable[Metric]:
        return merged(self._path, "counter")


def merged(path: str, kind: str) -> Iterable[Metric]:
    """Every worker's metrics of files `KIND_*.db` (`*`: all), one family per name."""
    files = glob.glob(os.path.join(path, f"{kind}_*.db"))
    metrics: Iterable[Metric] = MultiProcessCollector.merge(files)  # type: ignore[no-untyped-call]
    return metrics


def worker_exposition(
    path: str, ready: Callable[[], bool], own: SupervisorMetrics
) -> Callable[[], bytes]:
    """The supervisor's /metrics body, as a function of nothing."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerMetrics(path, ready, own))
    return functools.partial(generate_latest, registry)


def retire_worker(path: str, pid: int) -> None:
    """After worker `pid` exited: drop its live gauges, fold its counters and histograms into
    one archive file per type, so a scrape reads a bounded number of files however often
    workers restart.

    Synchronous on purpose: the supervisor runs it on the event loop that also answers
    /metrics, so no scrape sees the new archive and the dead worker's file both.
    """
    mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
    for kind in ("counter", "histogram"):
        dead = os.path.join(path, f"{kind}_{pid}.db")
        if not os.path.exists(dead):
            continue
        archive = os.path.join(path, f"{kind}_archive.db")
        totals: dict[str, float] = {}
        for source in (archive, dead):
            if os.path.exists(source):
                for key, value, _, _ in MmapedDict.read_all_values_from_file(source):  # type: ignore[no-untyped-call]
                    totals[key] = totals.get(key, 0.0) + value
        partial = archive + ".partial"  # not *.db: never read half-written
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
        out = MmapedDict(partial)  # type: ignore[no-untyped-call]
        try:
            for key, value in totals.items():
                out.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]
        finally:
            out.close()  # type: ignore[no-untyped-call]
        os.replace(partial, archive)
        os.remove(dead)
