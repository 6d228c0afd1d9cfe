"""The access log, one line per request, and the logging `mendpoint serve` sets up.

The access line carries what an operator needs to follow one request (its id, route, status,
upstream status, failure code, rule, mode, durations, fallback reason) and nothing secret:
no query string, no headers, no caller keys. With the access log off, the per-request cost is
one `isEnabledFor` check. In a served gateway (`setup_logging`) the line is built here once and
handed to a background writer (gateway.telemetry.access_writer), not through `logging`.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.telemetry.tracing import Trace

from gateway.failure import Failure, Mode
from gateway.observers import Classified, FailureNotes
from gateway.telemetry.access_writer import AccessWriter
from gateway.telemetry.log_lines import LogFormat, Stamp, json_line, setup_events, text_line

ACCESS = logging.getLogger("mendpoint.access")


def setup_logging(level: str, fmt: LogFormat, access: bool) -> None:
    """Configure the process's event log (`log_lines.setup_events`) and its access log."""
    setup_events(level, fmt)
    set_access_log(access)
    close_access_log()
    global _access
    _access = _AccessOutput(AccessWriter(sys.stderr), json_line if fmt == "json" else text_line)


@dataclass(frozen=True, slots=True)
class _AccessOutput:
    writer: AccessWriter
    line: Callable[[str, str, str, str, object], str]
    stamp: Stamp = dataclasses.field(default_factory=Stamp)


_access: _AccessOutput | None = None
"""Set by `setup_logging`; without it (a gateway embedded in a test) lines go via logging."""


def close_access_log() -> None:
    """Write every queued access line and stop the writer; later lines go through logging."""
    global _access
    output, _access = _access, None
    if output is not None:
        output.writer.close()


atexit.register(close_access_log)


def set_access_log(enabled: bool) -> None:
    ACCESS.setLevel(logging.INFO if enabled else logging.WARNING)


class Throttled:
    """A warning that the outside world can trigger (a malformed request, a bad upstream
    certificate) is written at most once per `interval_s` per key, with how many were held
    back: a flood of them must not flood the log."""

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self._interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return
        if len(self._last) > 1024:  # keys come from outside: bounded
            self._last.clear()
            self._held.clear()
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            message += f" ({held} more like it in the last {self._interval_s:.0f} s)"
        self._logger.warning(message, *args)


@dataclass(slots=True)
class AccessRecord:
    """Filled in as the request goes through the gateway; logged once when it ends."""

    request_id: str
    method: str
    path: str
    started: float
    route: str = "-"
    status: int = 0
    upstream_status: int | None = None
    upstream_ms: float | None = None
    failure_code: str | None = None
    rule: str | None = None
    mode: str | None = None
    fallback: str | None = None
    retryable: bool | None = None
    retry_after_ms: int | None = None
    fix_required: bool = False
    """The failure told the caller what to fix (for follow-ups' readings; not logged)."""
    follows: str | None = None
    """The request id of the failure this request follows up (gateway.feedback.followups)."""
    followup: str | None = None
    """That failure's outcome, settled by this request."""
    upstream_request_id: str | None = None
    """The upstream's own `X-Request-Id` on its answer, when it differs from ours."""
    trace: Trace | None = None
    """The exchange's spans, while tracing is on (docs/operations.md#traces)."""

    def note_failure(self, failure: Failure, rule: str, mode: Mode) -> None:
        """The classified failure, on the access line and (as an event) on the span."""
        self.failure_code, self.rule, self.mode = failure.code, rule, mode.value
        self.retryable, self.retry_after_ms = failure.retryable, failure.retry_after_ms
        self.fix_required = bool(failure.fix_required)
        if self.trace is not None:
            self.trace.classified(
                failure.code,
                failure.category.value,
                rule,
                failure.retryable,
                failure.retry_after_ms,
                mode.value,
            )

    def note_fallback(self, reason: str) -> None:
        self.fallback = reason

    def note_mcp_failure(self, jsonrpc_code: int | None) -> None:
        if self.trace is not None:
            self.trace.mcp_failed(jsonrpc_code)

    def emit(self) -> None:
        if not ACCESS.isEnabledFor(logging.INFO):
            return
        fields = {
            "request_id": self.request_id,
            "route": self.route,
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "upstream_status": self.upstream_status,
            "duration_ms": round((time.monotonic() - self.started) * 1000, 2),
            "upstream_ms": None if self.upstream_ms is None else round(self.upstream_ms, 2),
            "failure_code": self.failure_code,
            "rule": self.rule,
            "mode": self.mode,
            "fallback": self.fallback,
            "follows": self.follows,
            "followup": self.followup,
        }
        if self.upstream_request_id is not None:
            fields["upstream_request_id"] = self.upstream_request_id
        if self.trace is not None:
            ids = self.trace.ids()
            if ids is not None:
                fields["trace_id"], fields["span_id"] = ids
        output = _access
        if output is None:
            ACCESS.info("request", extra={"fields": fields})
            return
        stamp = output.stamp.now()
        output.writer.put(output.line(stamp, "INFO", "mendpoint.access", "request", fields))


class AccessNotes:
    """The failure path's notes on the request's own record, as a declared observer
    (gateway/observers.py): the access line's failure fields and the span's failure event."""

    def classified(self, event: Classified) -> None:
        if event.notes is not None:
            event.notes.note_failure(event.failure, event.rule, event.mode)

    def upgraded(self, route: str, mode: Mode) -> None:
        pass  # the access line has the mode already

    def fell_back(self, route: str, reason: str, notes: FailureNotes | None) -> None:
        if notes is not None:
            notes.note_fallback(reason)
