"""The gateway's side of trace export: spans recorded as plain data, sent to an exporter process.

Building the SDK's span objects and encoding them to OTLP cost about 40 µs and 100 µs per
span of the gateway's own CPU (docs/operations.md#traces). So the request path records only
what a span is: its ids (the SDK's id generator), its sampling decision (the SDK's sampler,
asked once per exchange), times, attributes, events and links, in a `Recorded`. An ended,
sampled span becomes a tuple in a buffer; every `FLUSH_S`, or every `BATCH` spans, the buffer
is marshalled and written to the exporter process's stdin without blocking
(gateway.telemetry.span_export builds the SDK spans there and exports them). A pipe that
does not drain (the exporter stuck on a hung collector) fills a bounded backlog, then spans
are dropped and counted: a request never waits for tracing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import marshal
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
    _get_from_env_or_default,
)
from opentelemetry.trace import Link, SpanKind

log = logging.getLogger("mendpoint.tracing")

BATCH = 256
FLUSH_S = 0.1
BACKLOG_BYTES = 8 << 20
"""What may wait for a pipe that does not drain, before spans are dropped (8 MiB)."""
SAMPLED = 1
REPORT_EVERY_S = 60.0
READY_S = 10.0
EXPORTER = "gateway.telemetry.span_export"
RECORDED = frozenset({Decision.RECORD_AND_SAMPLE})
"""Exported: sampled. (RECORD_ONLY spans go to no exporter in the SDK either.)"""


class Recorded:
    """One span while its exchange runs: what the SDK's span would hold, as plain data."""

    __slots__ = (
        "attributes",
        "end_ns",
        "error",
        "events",
        "flags",
        "kind",
        "links",
        "name",
        "parent_id",
        "parent_remote",
        "span_id",
        "start_ns",
        "trace_id",
        "trace_state",
    )

    def __init__(
        self,
        name: str,
        kind: SpanKind,
        trace_id: int,
        span_id: int,
        parent_id: int | None,
        parent_remote: bool,
        flags: int,
        trace_state: str | None,
        start_ns: int,
        attributes: dict[str, Any],
    ) -> None:
        self.name = name
        self.kind = kind.value
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.parent_remote = parent_remote
        self.flags = flags
        self.trace_state = trace_state
        self.start_ns = start_ns
        self.end_ns = 0
        self.attributes = attributes
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self.links: list[tuple[int, int, int, bool]] = []
        self.error = False

    def is_recording(self) -> bool:
        return bool(self.flags & SAMPLED)

    def traceparent(self) -> str:
        """The `traceparent` that makes this span the parent of whoever receives it."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{self.flags:02x}"

    def add_event(self, name: str, attributes: dict[str, Any], at_ns: int | None = None) -> None:
        self.events.append((name, time.time_ns() if at_ns is None else at_ns, attributes))

    def record(self) -> tuple[Any, ...]:
        """What the exporter process rebuilds the SDK span from (span_export.Builder)."""
        return (
            self.name,
            self.kind,
            self.trace_id,
            self.span_id,
            self.parent_id,
            self.parent_remote,
            self.flags,
            self.trace_state,
            self.start_ns,
            self.end_ns,
            self.attributes,
            self.events,
            self.links,
            self.error,
        )


def _wait_ready(out: IO[bytes]) -> None:
    """Until the exporter process has its exporter (it says so), at most `READY_S`: the
    first spans then go out at once, as they did from a thread of the gateway's own."""
    with out:
        readable, _, _ = select.select([out], [], [], READY_S)
        if not readable or not out.readline().startswith(b"ready"):
            log.warning("the trace exporter process is not ready after %.0f s", READY_S)


class SpanPipe:
    """Starts spans (ids, sampling) and sends the ended ones to the exporter process."""

    def __init__(
        self,
        endpoint: str | None,
        headers: Mapping[str, str],
        service_name: str | None,
        sample_ratio: float | None,
    ) -> None:
        self._sampler: Sampler = (
            _get_from_env_or_default()
            if sample_ratio is None
            else ParentBased(TraceIdRatioBased(sample_ratio))
        )
        self._bound = None if sample_ratio is None else TraceIdRatioBased(sample_ratio).bound
        """The configured ratio's bound on a trace id's low 64 bits, for `head_sampled`."""
        self._ids = RandomIdGenerator()
        self._buffer: list[tuple[Any, ...]] = []
        self._backlog = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._lock = threading.Lock()
        self.dropped = 0
        self._reported = -REPORT_EVERY_S
        settings = {"endpoint": endpoint, "headers": dict(headers), "service_name": service_name}
        self._process = subprocess.Popen(
            [sys.executable, "-m", EXPORTER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        # The settings, collector headers included, go through the pipe: a command line is
        # readable by every local user (/proc/PID/cmdline).
        self._process.stdin.write(json.dumps(settings).encode() + b"\n")
        self._process.stdin.flush()
        _wait_ready(self._process.stdout)
        self._fd = self._process.stdin.fileno()
        os.set_blocking(self._fd, False)
        fcntl.fcntl(self._fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)  # no other child holds it open

    @property
    def exporter_pid(self) -> int:
        return self._process.pid

    # -- the request path ----------------------------------------------------------------

    def new_trace_id(self) -> int:
        return self._ids.generate_trace_id()

    def new_span_id(self) -> int:
        return self._ids.generate_span_id()

    def head_sampled(self, parent: Context | None, trace_id: int) -> bool:
        """The head sampler's word on an exchange: its caller's decision (`parent`), else on
        a new trace with `trace_id`. Without a parent, the configured ratio decides as
        `TraceIdRatioBased` does (its bound on the id's low 64 bits), without a sampling
        result built per request; a sampler the `OTEL_TRACES_SAMPLER` variables chose, and
        any parent, are asked as the SDK asks them."""
        bound = self._bound
        if parent is None and bound is not None:
            return trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < bound
        decision = self._sampler.should_sample(parent, trace_id, "", SpanKind.SERVER)
        return decision.decision in RECORDED

    def start(
        self,
        name: str,
        kind: SpanKind,
        parent: Context | Recorded | None,
        start_ns: int,
        attributes: dict[str, Any],
        links: list[Link] | None = None,
        trace_id: int | None = None,
        span_id: int | None = None,
        kept: bool = False,
    ) -> Recorded:
        """A span, sampled as the SDK's tracer samples it: the exchange's by the sampler
        (its caller's decision, else the ratio), an attempt's as its exchange's. A new trace
        takes `trace_id` (and the span `span_id`) when given; `kept`: sampled whatever the
        sampler says (a failure kept, gateway.telemetry.deferred)."""
        if isinstance(parent, Recorded):
            return Recorded(
                name,
                kind,
                parent.trace_id,
                self._ids.generate_span_id(),
                parent.span_id,
                False,
                parent.flags,
                parent.trace_state,
                start_ns,
                attributes,
            )
        remote = None if parent is None else trace.get_current_span(parent).get_span_context()
        parent_id = None
        if remote is not None and remote.is_valid:
            trace_id, parent_id = remote.trace_id, remote.span_id
        elif trace_id is None:
            trace_id = self._ids.generate_trace_id()
        decision = self._sampler.should_sample(parent, trace_id, name, kind, attributes, links)
        state = decision.trace_state
        span = Recorded(
            name,
            kind,
            trace_id,
            self._ids.generate_span_id() if span_id is None else span_id,
            parent_id,
            parent_id is not None and bool(remote and remote.is_remote),
            SAMPLED if kept or decision.decision in RECORDED else 0,
            state.to_header() if state else None,
            start_ns,
            attributes,
        )
        if decision.attributes:
            attributes.update(decision.attributes)
        for link in links or ():
            linked = link.context
            span.links.append(
                (linked.trace_id, linked.span_id, int(linked.trace_flags), linked.is_remote)
            )
        return span

    def end(self, span: Recorded, at_ns: int | None = None) -> None:
        if not span.flags & SAMPLED:
            return
        span.end_ns = time.time_ns() if at_ns is None else at_ns
        self._buffer.append(span.record())
        if len(self._buffer) >= BATCH:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # not on the loop (a test's thread): the next flush takes it
            self._timer = loop.call_later(FLUSH_S, self._tick)

    # -- to the exporter -----------------------------------------------------------------

    def _tick(self) -> None:
        self._timer = None
        self.flush()
        if self._backlog:  # the pipe was full: try again later
            self._timer = asyncio.get_running_loop().call_later(FLUSH_S, self._tick)

    def flush(self) -> None:
        """The buffered spans into the pipe, as far as it takes them without waiting; once
        the pipe is full and `BACKLOG_BYTES` wait behind it, the newest are dropped."""
        with self._lock:
            batch, self._buffer = self._buffer, []
            if batch:
                body = marshal.dumps(batch)
                if self._backlog and len(self._backlog) + len(body) > BACKLOG_BYTES:
                    self._drop(len(batch))
                else:
                    self._backlog += len(body).to_bytes(4, "big") + body
            self._write()

    def _write(self) -> None:
        while self._backlog:
            try:
                written = os.write(self._fd, self._backlog)
            except BlockingIOError:
                return
            except OSError as exc:  # the exporter is gone: nothing more will be read
                if exc.errno in (errno.EPIPE, errno.EBADF):
                    self._drop(0)
                    self._backlog.clear()
                    return
                raise
            del self._backlog[:written]

    def _drop(self, count: int) -> None:
        """Spans the exporter could not take (or a gone exporter): counted, said once a minute."""
        self.dropped += count
        now = time.monotonic()
        if now - self._reported >= REPORT_EVERY_S:
            self._reported = now
            log.warning(
                "the trace exporter does not keep up (or is gone): %d spans dropped so far",
                self.dropped,
            )

    def force_flush(self, wait_s: float) -> bool:
        """Everything buffered into the pipe within `wait_s`; the exporter's batch processor
        sends it within its schedule delay (`OTEL_BSP_SCHEDULE_DELAY`). The exporter is not
        asked to flush: its reading thread would wait on the export, and stop reading."""
        self.flush()
        deadline = time.monotonic() + wait_s
        while self._backlog and time.monotonic() < deadline:
            time.sleep(0.005)
            with self._lock:
                self._write()
        return not self._backlog

    def stop(self, wait_s: float) -> bool:
        """Flush, close the pipe (the exporter sends what it holds, then exits) and wait for
        it `wait_s` at most; a hung collector's exporter is killed then. True: it ended."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        begun = time.monotonic()
        self.force_flush(wait_s)
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):
            self._process.stdin.close()
        try:
            self._process.wait(max(0.0, wait_s - (time.monotonic() - begun)))
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            return False
        return True
