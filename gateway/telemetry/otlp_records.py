"""OTLP built straight from the gateway's span records, in the trace exporter process.

The SDK's path from a record to the wire is a `ReadableSpan` per span and then
`encode_spans`, which builds every attribute's `KeyValue` afresh: about 115 µs a span here,
most of the exporter's CPU (docs/operations.md#traces). The messages are the official
`opentelemetry-proto` ones either way; built here from the records, with the `KeyValue` of
each attribute value that repeats in a batch (the method, the route, the rule, the code)
made once and copied, a span costs about 18 µs. Everything around the encoding stays the
SDK's: `BatchSpanProcessor` batches (its queue and `OTEL_BSP_*`), and `OTLPSpanExporter`'s
client sends each batch with its retries, headers, compression, timeout and `OTEL_EXPORTER_OTLP_*`
settings (gateway/fence/otel_private.py). What this writes decodes to the spans the SDK's
encoder writes: tests/telemetry/test_otlp_records.py holds both to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as ProtoResource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags

from gateway.fence.otel_private import send_serialized

HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
ERROR, UNSET = Status.StatusCode.STATUS_CODE_ERROR, Status.StatusCode.STATUS_CODE_UNSET
Record = tuple[Any, ...]
"""`gateway.telemetry.span_pipe.Recorded.record`: one ended span, as plain data."""
Made = dict[tuple[str, type, Any], KeyValue]
"""The `KeyValue` of each attribute value met in the batch being encoded."""
UNLIMITED = 1 << 31


class RecordSpan:
    """A record as the SDK's `BatchSpanProcessor` queues it: all it reads is whether the
    span is sampled (every record is; the gateway sends no other)."""

    __slots__ = ("context", "record")

    def __init__(self, record: Record) -> None:
        self.record = record
        self.context = SpanContext(record[2], record[3], False, TraceFlags(record[6]))


def any_value(value: Any) -> AnyValue:
    """An attribute's value as the SDK's encoder writes it."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, list | tuple):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    return AnyValue(string_value=str(value))


class Encoder:
    """A batch of records → one `ExportTraceServiceRequest`, as `encode_spans` would write
    it for the same spans under one resource and one instrumentation scope."""

    def __init__(self, resource: Resource, scope: str) -> None:
        self._resource = ProtoResource(
            attributes=[KeyValue(key=k, value=any_value(v)) for k, v in resource.attributes.items()]
        )
        self._schema = resource.schema_url
        self._scope = InstrumentationScope(name=scope)
        limits = SpanLimits()
        self._max_attributes = _limit(limits.max_span_attributes)
        self._max_length = limits.max_span_attribute_length
        self._max_events = _limit(limits.max_events)
        self._max_links = _limit(limits.max_links)

    def request(self, records: Sequence[Record]) -> ExportTraceServiceRequest:
        made: Made = {}
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add(schema_url=self._schema)
        resource_spans.resource.CopyFrom(self._resource)
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.CopyFrom(self._scope)
        for record in records:
            self._span(scope_spans.spans.add(), record, made)
        return request

    def _span(
        self, span: Span, record: Record, made: dict[tuple[str, type, Any], KeyValue]
    ) -> None:
        (name, kind, trace_id, span_id, parent_id, parent_remote, _, trace_state) = record[:8]
        (start_ns, end_ns, attributes, events, links, error) = record[8:]
        span.trace_id = trace_id.to_bytes(16, "big")
        span.span_id = span_id.to_bytes(8, "big")
        if trace_state:
            span.trace_state = trace_state
        if parent_id is not None:
            span.parent_span_id = parent_id.to_bytes(8, "big")
        span.flags = HAS_IS_REMOTE | (IS_REMOTE if parent_id is not None and parent_remote else 0)
        span.name = name
        span.kind = kind + 1  # the API's INTERNAL is 0, the protocol's 1
        span.start_time_unix_nano = start_ns
        span.end_time_unix_nano = end_ns
        kept, dropped = self._attributes(attributes, made)
        span.attributes.extend(kept)
        span.dropped_attributes_count = dropped
        for event_name, at_ns, values in events[: self._max_events]:
            event = span.events.add(name=event_name, time_unix_nano=at_ns)
            event_kept, event_dropped = self._attributes(values, made)
            event.attributes.extend(event_kept)
            event.dropped_attributes_count = event_dropped
        span.dropped_events_count = max(0, len(events) - self._max_events)
        for link_trace, link_span, _, remote in links[: self._max_links]:
            link = span.links.add(
                trace_id=link_trace.to_bytes(16, "big"), span_id=link_span.to_bytes(8, "big")
            )
            link.flags = HAS_IS_REMOTE | (IS_REMOTE if remote else 0)
        span.dropped_links_count = max(0, len(links) - self._max_links)
        span.status.code = ERROR if error else UNSET  # present either way, as the SDK writes it

    def _attributes(self, values: dict[str, Any], made: Made) -> tuple[list[KeyValue], int]:
        kept = []
        for key, value in list(values.items())[: self._max_attributes]:
            if self._max_length is not None and isinstance(value, str):
                value = value[: self._max_length]
            hashable = not isinstance(value, list)
            index = (key, type(value), value) if hashable else None
            pair = made.get(index) if index is not None else None
            if pair is None:
                pair = KeyValue(key=key, value=any_value(value))
                if index is not None:
                    made[index] = pair
            kept.append(pair)
        return kept, max(0, len(values) - self._max_attributes)


class RecordExporter(SpanExporter):
    """The SDK's OTLP/HTTP exporter, sending batches this module encodes."""

    def __init__(self, exporter: OTLPSpanExporter, encoder: Encoder) -> None:
        self._exporter = exporter
        self._encoder = encoder

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        try:
            data = self._encoder.request([s.record for s in spans]).SerializePartialToString()
        except Exception:
            return SpanExportResult.FAILURE
        sent = send_serialized(self._exporter, data)
        return SpanExportResult.SUCCESS if sent else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _limit(value: int | None) -> int:
    """A `SpanLimits` count (None: unlimited, as `OTEL_*_LIMIT` may set)."""
    return UNLIMITED if value is None else value
