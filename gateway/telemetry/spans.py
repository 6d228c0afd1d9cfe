"""The spans of one exchange, in the conventions trace backends query (docs/operations.md#traces).

One SERVER span per exchange, following the stable HTTP semantic conventions and, on MCP
routes, the MCP ones; one CLIENT span per upstream attempt, a replay counted with
`http.request.resend_count`; the gateway's own facts under `mendpoint.`. This module imports
the OpenTelemetry API and SDK sampler, so it is loaded only once tracing is on
(`gateway.telemetry.tracing.Tracing.start`): with tracing off no request touches it.

A span here is plain data (`span_pipe.Recorded`): the SDK's span objects are built, and
encoded to OTLP, in the exporter process (gateway.telemetry.span_export), off the gateway's
CPU. The server span is started lazily, with the exchange's start time: an MCP request names
its caller's span in `params._meta.traceparent`, which is known only once the body was read,
and a span's parent cannot change after it started.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind

from gateway.telemetry.span_conventions import (
    CHILD_FACTS,
    CLIENT_CLOSED,
    FAILURE_EVENT,
    OTHER_ERROR,
    TRACEPARENT,
    TRACESTATE,
    Finished,
    UpstreamOrigin,
    error_type,
    never_raises,
    parent_from,
    request_method,
)
from gateway.telemetry.span_pipe import Recorded, SpanPipe

KEPT_FOR = "mendpoint.sampled_for"
"""Why an exchange the head sampler dropped was exported after all: `failure`."""


class ExchangeTrace:
    """The spans of one exchange: filled in by the data path, exported when it ends."""

    __slots__ = (
        "_attempt",
        "_ids",
        "_kept",
        "_link",
        "_now",
        "_parent",
        "_pipe",
        "_start_ns",
        "_to_child",
        "attributes",
        "category",
        "mcp_name",
        "resolution",
        "span",
    )

    def __init__(
        self,
        pipe: SpanPipe,
        method: str,
        path: str,
        scheme: str,
        host: str | None,
        version: str,
        traceparent: str | None,
        tracestate: str | None,
        *,
        ids: tuple[int, int] | None = None,
        start_ns: int | None = None,
        kept: str | None = None,
        now: Callable[[], int] = time.time_ns,
    ) -> None:
        """`ids` (trace, server span) and `start_ns` when they were chosen before (the head
        sampler's decision, gateway.telemetry.tracing); `kept`: exported whatever the sampler
        says, and why (`mendpoint.sampled_for`); `now`: the clock, a kept exchange's own
        recorded times when it is built again after the fact (gateway.telemetry.deferred)."""
        self._pipe = pipe
        self._now = now
        self._ids = ids
        self._kept = kept
        self._start_ns = now() if start_ns is None else start_ns
        self._parent = parent_from(traceparent, tracestate)
        self._link: Context | None = None
        self._attempt: Recorded | None = None
        self._to_child = False
        self.span: Recorded | None = None
        self.category: str | None = None
        self.resolution: str | None = None
        self.mcp_name: str | None = None
        attributes: dict[str, Any] = request_method(method)
        attributes["url.path"] = path
        attributes["url.scheme"] = scheme
        attributes["network.protocol.version"] = version
        if host:
            name, _, port = host.rpartition(":") if host[-1:] != "]" else (host, "", "")
            if name and port.isdigit():
                attributes["server.address"], attributes["server.port"] = name, int(port)
            else:
                attributes["server.address"] = host
        if kept is not None:
            attributes[KEPT_FOR] = kept
        self.attributes = attributes

    # The MCP conventions (docs/operations.md#traces).

    @never_raises
    def mcp_request(
        self, message: Any, session_id: str | None, protocol_version: str | None
    ) -> None:
        """The MCP side of the span: the first request (or notification) in the message, its
        session and protocol version, and its `_meta.traceparent` as the parent (the HTTP
        caller's span, when it differs, becomes a link, as the MCP conventions say)."""
        first = next(
            (m for m in (message if isinstance(message, list) else (message,)) if _is_call(m)),
            None,
        )
        attributes = self.attributes
        attributes["network.protocol.name"] = "http"
        attributes["network.transport"] = "tcp"
        if session_id:
            attributes["mcp.session.id"] = session_id
        if protocol_version:
            attributes["mcp.protocol.version"] = protocol_version
        if first is None:
            return
        method = first["method"]
        attributes["mcp.method.name"] = method
        self.mcp_name = method
        version = first.get("jsonrpc")
        if isinstance(version, str) and version != "2.0":
            attributes["jsonrpc.protocol.version"] = version
        request_id = first.get("id")
        if isinstance(request_id, str | int) and not isinstance(request_id, bool):
            attributes["jsonrpc.request.id"] = str(request_id)
        params = first.get("params")
        if not isinstance(params, dict):
            return
        self._mcp_params(method, params)
        meta = params.get("_meta")
        if isinstance(meta, dict) and self.span is None:
            tp, ts = meta.get(TRACEPARENT), meta.get(TRACESTATE)
            parent = parent_from(
                tp if isinstance(tp, str) else None, ts if isinstance(ts, str) else None
            )
            if parent is not None:
                self._link, self._parent = self._parent, parent

    def _mcp_params(self, method: str, params: dict[str, Any]) -> None:
        attributes = self.attributes
        name = params.get("name")
        if method == "tools/call" and isinstance(name, str):
            attributes["gen_ai.tool.name"] = name
            attributes["gen_ai.operation.name"] = "execute_tool"
            self.mcp_name = f"{method} {name}"
        elif method == "prompts/get" and isinstance(name, str):
            attributes["gen_ai.prompt.name"] = name
            self.mcp_name = f"{method} {name}"
        uri = params.get("uri")
        if method.startswith("resources/") and isinstance(uri, str):
            attributes["mcp.resource.uri"] = uri
        version = params.get("protocolVersion")
        if method == "initialize" and isinstance(version, str):
            attributes.setdefault("mcp.protocol.version", version)

    @never_raises
    def mcp_failed(self, jsonrpc_code: int | None) -> None:
        """A JSON-RPC error (its code) or a tool result with `isError` (`tool_error`)."""
        if jsonrpc_code is None:
            self.attributes["error.type"] = "tool_error"
        else:
            code = str(jsonrpc_code)
            self.attributes["error.type"] = code
            self.attributes["rpc.response.status_code"] = code

    # The gateway's own facts.

    @never_raises
    def classified(
        self,
        code: str,
        category: str,
        rule: str,
        retryable: bool,
        retry_after_ms: int | None,
        mode: str,
    ) -> None:
        """A classified failure: an event at the moment it was classified."""
        self.category = category
        event: dict[str, Any] = {
            "mendpoint.failure.code": code,
            "mendpoint.failure.category": category,
            "mendpoint.rule.id": rule,
            "mendpoint.failure.retryable": retryable,
            "mendpoint.mode": mode,
        }
        if retry_after_ms is not None:
            event["mendpoint.failure.retry_after_ms"] = retry_after_ms
        self._server_span().add_event(FAILURE_EVENT, event, self._now())

    # One CLIENT span per upstream attempt (`AttemptWatcher` of the upstream client).

    @never_raises
    def sending(
        self,
        resend_count: int,
        method: str,
        origin: UpstreamOrigin,
        target: str,
        headers: MutableMapping[str, str],
    ) -> None:
        """An attempt starts: its span, and the `traceparent` that makes it the upstream's
        parent (the caller's `tracestate` goes on as it came)."""
        self._end_attempt()
        server = self._server_span()
        if not server.is_recording():  # not sampled: the upstream's parent is the exchange
            headers[TRACEPARENT] = server.traceparent()
            return
        attributes: dict[str, Any] = request_method(method)
        scheme = "https" if origin.tls else "http"
        attributes["server.address"] = origin.host
        attributes["server.port"] = origin.port
        attributes["url.full"] = f"{scheme}://{origin.host}:{origin.port}{target.split('?')[0]}"
        if resend_count:
            attributes["http.request.resend_count"] = resend_count
        span = self._pipe.start(
            attributes.get("http.request.method", method),
            SpanKind.CLIENT,
            server,
            self._now(),
            attributes,
        )
        self._attempt = span
        headers[TRACEPARENT] = span.traceparent()

    @never_raises
    def to_child(self, executable: str) -> None:
        """A bridge's attempt: the request written to its stdio server's stdin, answered when
        the exchange ends. Its span carries the request's MCP facts and, at the end, the
        answer's `error.type`; nothing is added to the message (the child reads the bytes
        the client sent)."""
        self._end_attempt()
        server = self._server_span()
        if not server.is_recording():
            return
        attributes: dict[str, Any] = {"network.transport": "pipe"}
        attributes["process.executable.name"] = executable.rsplit("/", 1)[-1]
        for key in CHILD_FACTS:
            if key in self.attributes:
                attributes[key] = self.attributes[key]
        name = self.mcp_name or self.attributes["http.request.method"]
        self._attempt = self._pipe.start(name, SpanKind.CLIENT, server, self._now(), attributes)
        self._to_child = True

    def failed(self, exc: BaseException) -> None:
        """The attempt raised (connect, TLS, a reset, a timeout): it ends here."""
        self.failed_as(error_type(exc))

    @never_raises
    def failed_as(self, kind: str) -> None:
        """The attempt failed, its `error.type` `kind`."""
        span = self._attempt
        if span is None:
            return
        span.attributes["error.type"] = kind
        span.error = True
        self._pipe.end(span, self._now())
        self._attempt = None

    @never_raises
    def answered(self, status: int) -> None:
        """The attempt's response head; its span stays open until the exchange ends."""
        span = self._attempt
        if span is None:
            return
        span.attributes["http.response.status_code"] = status
        if status >= 400:
            span.attributes["error.type"] = str(status)
            span.error = True

    # The end.

    @never_raises
    def end(self, record: Finished) -> None:
        """The exchange is over: every fact on the server span, then both spans end."""
        self._end_attempt()
        span = self._server_span()
        if span.is_recording():
            attributes = self.attributes
            self._gateway_facts(record, attributes)
            if record.status in (0, CLIENT_CLOSED):  # no answer: cancelled, or an exception
                kind = "client_closed" if record.status else OTHER_ERROR
                attributes.setdefault("error.type", kind)
            else:
                attributes["http.response.status_code"] = record.status
                if record.status >= 500:
                    attributes.setdefault("error.type", str(record.status))
            if record.route != "-":
                attributes["http.route"] = record.route
            span.name = self._name(record.route)
            span.error = "error.type" in attributes
        self._pipe.end(span, self._now())

    @never_raises
    def ids(self) -> tuple[str, str] | None:
        """The trace and span ids the access log carries (hex, as W3C writes them)."""
        span = self.span
        if span is None:
            return None
        return f"{span.trace_id:032x}", f"{span.span_id:016x}"

    def _gateway_facts(self, record: Finished, attributes: dict[str, Any]) -> None:
        attributes["mendpoint.request.id"] = record.request_id
        facts = (
            ("mendpoint.failure.code", record.failure_code),
            ("mendpoint.failure.category", self.category),
            ("mendpoint.rule.id", record.rule),
            ("mendpoint.failure.retryable", record.retryable),
            ("mendpoint.failure.retry_after_ms", record.retry_after_ms),
            ("mendpoint.mode", record.mode),
            ("mendpoint.fallback.reason", record.fallback),
            ("mendpoint.resolution.outcome", self.resolution),
            ("mendpoint.followup.outcome", record.followup),
        )
        for key, value in facts:
            if value is not None:
                attributes[key] = value

    def _name(self, route: str) -> str:
        if self.mcp_name is not None:
            return self.mcp_name
        method = self.attributes["http.request.method"]
        return method if route == "-" else f"{method} {route}"

    def _server_span(self) -> Recorded:
        span = self.span
        if span is None:
            links = None
            if self._link is not None:
                linked = trace.get_current_span(self._link).get_span_context()
                links = [Link(linked)]
            trace_id, span_id = self._ids if self._ids is not None else (None, None)
            span = self.span = self._pipe.start(
                self.attributes["http.request.method"],
                SpanKind.SERVER,
                self._parent,
                self._start_ns,
                self.attributes,
                links,
                trace_id,
                span_id,
                kept=self._kept is not None,
            )
        return span

    def _end_attempt(self) -> None:
        attempt = self._attempt
        if attempt is None:
            return
        if self._to_child:  # the child's answer: what mcp_failed found in it
            for key in ("error.type", "rpc.response.status_code"):
                if key in self.attributes:
                    attempt.attributes[key] = self.attributes[key]
            attempt.error = "error.type" in attempt.attributes
            self._to_child = False
        self._pipe.end(attempt, self._now())
        self._attempt = None


def _is_call(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("method"), str)
