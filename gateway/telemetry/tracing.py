"""Tracing on or off: the one check the data path makes, and starting and stopping the SDK.

Off unless configured (`telemetry.otlp_endpoint`, or the standard `OTEL_EXPORTER_OTLP_*`
endpoint variables; `OTEL_SDK_DISABLED=true` wins over both). Off, a request costs one
attribute test in `gateway.serve.handler` and the OpenTelemetry SDK is never imported; on,
`gateway.telemetry.spans` records each exchange's spans as plain data and an exporter
process of the gateway's own builds the SDK's spans from them and exports them in batches
(gateway.telemetry.span_pipe, span_export), so a slow or dead collector drops spans and
never holds a request (docs/operations.md#traces).
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from aiohttp import web  # a type only: the resolver and stdio need no aiohttp (breaker.py)

    from gateway.telemetry.deferred import DeferredTrace, KeptFailures
    from gateway.telemetry.span_pipe import SpanPipe
    from gateway.telemetry.spans import ExchangeTrace

    Trace = ExchangeTrace | DeferredTrace

log = logging.getLogger("mendpoint.tracing")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TRACES_PATH = "/v1/traces"
STOP_WAIT_S = 2.0
"""How long stopping waits for the last batch; a hung collector does not hold a shutdown."""
INSTALL_HINT = "pip install 'mendpoint[otel]'"
EXPORTER_MODULE = "opentelemetry.exporter.otlp.proto.http"
"""What the exporter process imports: looked for (not imported) before tracing starts."""


class TracingUnavailable(RuntimeError):
    """The config asks for traces and the OpenTelemetry SDK is not installed."""


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """The `telemetry:` block as the tracer needs it (None: the `OTEL_*` variable, if any)."""

    otlp_endpoint: str | None = None
    service_name: str | None = None
    sample_ratio: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    keep_failures: bool = True
    max_kept_failures_per_s: int = 100


def traces_url(endpoint: str) -> str:
    """The collector's traces URL: `/v1/traces` is added to a URL without a path, as the
    OTLP exporter does for `OTEL_EXPORTER_OTLP_ENDPOINT`; a URL with a path is used as is."""
    if urlsplit(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + TRACES_PATH
    return endpoint


def wanted(settings: TraceSettings, environ: Mapping[str, str]) -> bool:
    """Whether tracing is configured at all, by the file or by the standard variables."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return settings.otlp_endpoint is not None or any(environ.get(n) for n in ENDPOINT_VARIABLES)


class Tracing:
    """The process's tracer: `on` is the one check a request makes."""

    def __init__(self) -> None:
        self.on = False
        self._pipe: SpanPipe | None = None
        self._exchange: type[ExchangeTrace] | None = None
        self._deferred: type[DeferredTrace] | None = None
        self._budget: KeptFailures | None = None
        self._parent: Callable[[str | None, str | None], Any] | None = None
        self._trace_id_of: Callable[[Any], int] | None = None

    def start(self, settings: TraceSettings, environ: Mapping[str, str] = os.environ) -> bool:
        """Build the provider and exporter when tracing is wanted; whether it is on.

        A config that names a collector without the SDK installed is an error; the standard
        variables alone (set for a whole cluster, say) only earn a warning.
        """
        self.stop()
        if not wanted(settings, environ):
            return False
        try:
            exporter_spec = importlib.util.find_spec(EXPORTER_MODULE)
            if exporter_spec is None:
                raise ImportError(name=EXPORTER_MODULE)
            from gateway.telemetry import deferred, spans
            from gateway.telemetry.span_conventions import parent_from, trace_id_of
            from gateway.telemetry.span_pipe import SpanPipe
        except ImportError as exc:
            if settings.otlp_endpoint is not None:
                raise TracingUnavailable(
                    f"telemetry.otlp_endpoint is set but the OpenTelemetry SDK is not "
                    f"installed ({exc.name}): {INSTALL_HINT}"
                ) from None
            log.warning("OTEL_EXPORTER_OTLP_*ENDPOINT is set but %s; no traces", INSTALL_HINT)
            return False
        endpoint = None if settings.otlp_endpoint is None else traces_url(settings.otlp_endpoint)
        self._pipe = SpanPipe(
            endpoint, settings.headers, settings.service_name, settings.sample_ratio
        )
        self._exchange = spans.ExchangeTrace
        self._deferred = deferred.DeferredTrace
        self._parent, self._trace_id_of = parent_from, trace_id_of
        self._budget = (
            deferred.KeptFailures(settings.max_kept_failures_per_s)
            if settings.keep_failures
            else None
        )
        self.on = True
        log.info("tracing on: spans exported over OTLP/HTTP to %s", endpoint or "OTEL_* endpoint")
        return True

    def begin(self, request: web.Request) -> Trace:
        """The trace of the exchange `request` starts (only while `on`): its spans, when the
        head sampler picks it (its caller's decision, else the ratio); else its facts, kept
        until its outcome says whether it is exported (gateway.telemetry.deferred)."""
        pipe = self._pipe
        assert pipe is not None and self._exchange is not None and self._deferred is not None
        assert self._parent is not None and self._trace_id_of is not None
        headers = request.headers
        version = request.version
        traceparent, tracestate = headers.get("traceparent"), headers.get("tracestate")
        parent = None if traceparent is None else self._parent(traceparent, tracestate)
        trace_id = pipe.new_trace_id() if parent is None else self._trace_id_of(parent)
        facts = (
            request.method,
            request.rel_url.raw_path,
            request.scheme,
            headers.get("Host"),
            f"{version.major}.{version.minor}",
            traceparent,
            tracestate,
        )
        trace: Trace
        if pipe.head_sampled(parent, trace_id):
            trace = self._exchange(pipe, *facts, ids=(trace_id, pipe.new_span_id()))
        else:
            trace = self._deferred(pipe, self._budget, trace_id, facts)
        CURRENT.set(trace)
        return trace

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Send what is buffered and let the exporter process finish within `wait_s`; one
        held by a collector that hangs is killed then (its last spans lost, nothing held)."""
        pipe, self._pipe = self._pipe, None
        self.on = False
        if pipe is not None and not pipe.stop(wait_s):
            log.warning("the trace collector did not take the last spans within %.0f s", wait_s)

    @property
    def exporter(self) -> SpanPipe | None:
        """The pipe to the exporter process, while tracing is on."""
        return self._pipe

    def force_flush(self, wait_s: float = STOP_WAIT_S) -> bool:
        """Send what is buffered now, and have the exporter export it (tests, and `stop`)."""
        pipe = self._pipe
        return pipe is None or pipe.force_flush(wait_s)


TRACING = Tracing()

CURRENT: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "mendpoint_exchange_trace", default=None
)
"""The exchange of the running request, for the one fact found where no request is at hand:
the resolver's outcome (`gateway.resolve.service`)."""


def note_resolution(outcome: str) -> None:
    """The resolver's outcome for the request being served (nothing when tracing is off)."""
    trace = CURRENT.get()
    if trace is not None:
        trace.resolution = outcome
