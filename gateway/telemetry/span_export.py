"""The trace exporter process: the SDK's spans built and sent over OTLP off the gateway's.

`python -m gateway.telemetry.span_export`, started by the gateway when tracing is on
(gateway.telemetry.span_pipe), reads its settings (a JSON line: collector URL, headers,
service name), then the spans the gateway recorded, from its stdin (length-prefixed
marshalled batches of `span_pipe.Recorded.record`). The SDK's `BatchSpanProcessor` queues and
batches them, and the SDK's OTLP/HTTP exporter sends each batch (timeouts, retries,
`OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_*`), encoded from the records by
gateway/telemetry/otlp_records.py. Encoding a span costs the gateway none of its own CPU, and
this process about 18 µs (docs/operations.md#traces).

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

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from gateway.telemetry.otlp_records import Encoder, RecordExporter, RecordSpan

DEFAULT_SERVICE = "mendpoint"
SCOPE = "mendpoint"
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


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="mendpoint trace exporter: %(message)s")
    settings = json.loads(sys.stdin.buffer.readline())
    exporter = OTLPSpanExporter(
        endpoint=settings.get("endpoint"), headers=settings.get("headers") or None
    )
    encoder = Encoder(resource_for(settings.get("service_name")), SCOPE)
    processor = BatchSpanProcessor(RecordExporter(exporter, encoder))
    sys.stdout.write("ready\n")  # the gateway waits for this before its first request
    sys.stdout.close()
    try:
        for batch in frames(sys.stdin.buffer):
            for record in batch:
                try:
                    processor.on_end(RecordSpan(record))  # type: ignore[arg-type]
                except Exception:  # one bad record costs that span, not the others
                    log.exception("a span could not be queued")
    finally:
        processor.shutdown()  # type: ignore[no-untyped-call]
    return 0


if __name__ == "__main__":
    sys.exit(main())
