"""What the spans of an exchange say, in the conventions trace backends query: the HTTP and MCP
attribute rules, the W3C parent a `traceparent` names, an attempt's `error.type`, and the
guard that keeps a trace from ever failing its request (docs/operations.md#traces).

Shared by the exchange's spans (gateway.telemetry.spans) and the facts kept for an exchange
the head sampler dropped (gateway.telemetry.deferred). Imports the OpenTelemetry API, so it is
loaded only once tracing is on.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
FAILURE_EVENT = "mendpoint.failure"
"""The event a classified failure adds to the server span, when it was classified."""
KNOWN_METHODS = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE", "QUERY"}
)
CHILD_FACTS = (
    "mcp.method.name",
    "mcp.session.id",
    "mcp.protocol.version",
    "jsonrpc.request.id",
    "gen_ai.tool.name",
    "gen_ai.operation.name",
)
"""What a bridge's attempt repeats of its exchange's MCP request."""
OTHER_METHOD = "_OTHER"
OTHER_ERROR = "_OTHER"
CLIENT_CLOSED = 499
_PROPAGATOR = TraceContextTextMapPropagator()
log = logging.getLogger("mendpoint.tracing")
REPORT_EVERY_S = 60.0
_reported: dict[str, float] = {}
P = ParamSpec("P")
R = TypeVar("R")


def never_raises(method: Callable[P, R | None]) -> Callable[P, R | None]:
    """A trace is an observer: whatever goes wrong in it is logged (once a minute per
    method), and the request it watches goes on as if tracing were off (None)."""

    @functools.wraps(method)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return method(*args, **kwargs)
        except Exception:
            name, now = method.__name__, time.monotonic()
            if now - _reported.get(name, -REPORT_EVERY_S) >= REPORT_EVERY_S:
                _reported[name] = now
                log.exception("tracing %s failed; the request goes on", name)
            return None

    return guarded


class Finished(Protocol):
    """What the access record knows when the exchange ends (`gateway.telemetry.logs`)."""

    request_id: str
    route: str
    status: int
    failure_code: str | None
    rule: str | None
    mode: str | None
    fallback: str | None
    retryable: bool | None
    retry_after_ms: int | None
    followup: str | None


class UpstreamOrigin(Protocol):
    """Where an attempt goes (the upstream client's `Origin`)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def tls(self) -> bool: ...


def request_method(method: str) -> dict[str, str]:
    """`http.request.method`: a method the conventions know, else `_OTHER` and the original."""
    if method in KNOWN_METHODS:
        return {"http.request.method": method}
    return {"http.request.method": OTHER_METHOD, "http.request.method_original": method}


def parent_from(traceparent: str | None, tracestate: str | None) -> Context | None:
    """The remote parent a W3C `traceparent` names, or None (absent or malformed)."""
    if not traceparent:
        return None
    carrier = {TRACEPARENT: traceparent}
    if tracestate:
        carrier[TRACESTATE] = tracestate
    extracted = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


def trace_id_of(parent: Context) -> int:
    """The trace id of the remote parent `parent_from` gave."""
    return int(trace.get_current_span(parent).get_span_context().trace_id)


def error_type(exc: BaseException) -> str:
    """`error.type` of an attempt that raised: the transport fault's kind where the upstream
    client named one, `timeout`, else the exception's class."""
    kind = getattr(exc, "kind", None)
    value = getattr(kind, "value", None)
    if isinstance(value, str):
        return value
    if isinstance(exc, TimeoutError):
        return "timeout"
    return type(exc).__qualname__
