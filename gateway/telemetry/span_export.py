"""The trace exporter process: the SDK's spans built and sent over OTLP off the gateway's.

`python -m gateway.telemetry.span_export`, started by the gateway when tracing is on
(gateway.telemetry.span_pipe), reads its settings (a JSON line: collector URL, headers,
service name), then the spans the gateway recorded, from its stdin (length-prefixed
marshalled batches of `span_pipe.Recorded.record`). It makes each one the SDK's own
`ReadableSpan` (attribute limits, resource, instrumentation scope) and hands it to the SDK's
`BatchSpanProcessor` and OTLP/HTTP exporter, so batching, timeouts, retries, `OTEL_BSP_*`
and `OTEL_EXPORTER_OTLP_*` are the SDK's. Building and encoding a span cost the gateway
about 140 µs of its own CPU in process; here they cost it nothing
(docs/operations.md#traces).

It ends when its stdin closes (the gateway stopped, or died: no exporter outlives it),
after exporting what it holds.
"""

from __future__ import annotations

import json
import logging
import marshal
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

DEFAULT_SERVICE = "mendpoint"
SCOPE = InstrumentationScope("mendpoint")
HEADER = 4
log = logging.getLogger("mendpoint.tracing")


def resource_for(service_name: str | None) -> Resource:
    """`service.name`: the config's, else `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES`,
    else `mendpoint` (not the SDK's `unknown_service`)."""
    resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    return resource


def frames(stream: BinaryIO) -> Iterator[Any]:
    """Each batch the gateway wrote, until its end of the pipe closes."""
    while True:
        head = _exactly(stream, HEADER)
        if head is None:
            return
        body = _exactly(stream, int.from_bytes(head, "big"))
        if body is None:
            return
        yield marshal.loads(body)


def _exactly(stream: BinaryIO, size: int) -> bytes | None:
    """`size` bytes, or None at the end: a pipe's read may return fewer than asked."""
    parts = []
    while size:
        part = stream.read(size)
        if not part:
            return None
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


class Builder:
    """The SDK's span from one record (gateway.telemetry.span_pipe.Recorded.record)."""

    def __init__(self, resource: Resource) -> None:
        self._resource = resource
        self._limits = SpanLimits()

    def span(self, record: tuple[Any, ...]) -> ReadableSpan:
        (
            name,
            kind,
            trace_id,
            span_id,
            parent_id,
            parent_remote,
            flags,
            trace_state,
            start_ns,
            end_ns,
            attributes,
            events,
            links,
            error,
        ) = record
        limits = self._limits
        state = TraceState.from_header([trace_state]) if trace_state else None
        context = SpanContext(trace_id, span_id, False, TraceFlags(flags), state)
        parent = (
            None
            if parent_id is None
            else SpanContext(trace_id, parent_id, parent_remote, TraceFlags(flags), state)
        )
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=BoundedAttributes(
                limits.max_span_attributes,
                attributes,
                immutable=False,
                max_value_len=limits.max_span_attribute_length,
            ),
            events=[
                Event(event, BoundedAttributes(limits.max_event_attributes, values), at)
                for event, at, values in events
            ],
            links=[
                Link(SpanContext(t, s, remote, TraceFlags(f)))
                for t, s, f, remote in links[: limits.max_links]
            ],
            kind=SpanKind(kind),
            status=Status(StatusCode.ERROR) if error else Status(StatusCode.UNSET),
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_scope=SCOPE,
        )


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="mendpoint trace exporter: %(message)s")
    settings = json.loads(sys.stdin.buffer.readline())
    exporter = OTLPSpanExporter(
        endpoint=settings.get("endpoint"), headers=settings.get("headers") or None
    )
    processor = BatchSpanProcessor(exporter)
    builder = Builder(resource_for(settings.get("service_name")))
    sys.stdout.write("ready\n")  # the gateway waits for this before its first request
    sys.stdout.close()
    try:
        for batch in frames(sys.stdin.buffer):
            for record in batch:
                try:
                    processor.on_end(builder.span(record))
                except Exception:  # one bad record costs that span, not the others
                    log.exception("a span could not be built")
    finally:
        processor.shutdown()  # type: ignore[no-untyped-call]
    return 0


if __name__ == "__main__":
    sys.exit(main())
