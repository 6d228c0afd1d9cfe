"""Every use of the OpenTelemetry exporter's private names, in one place, each with the reason.

The trace exporter process encodes the gateway's span records itself
(gateway/telemetry/otlp_records.py: several times cheaper than a `ReadableSpan` and
`encode_spans` per span) and hands the bytes to the SDK's `OTLPSpanExporter` to send, so its
transport, retries with backoff, headers, compression, timeout and `OTEL_EXPORTER_OTLP_*`
settings are the SDK's own. The exporter's public `export` takes `ReadableSpan`s only; what
sends bytes is its client:

- `OTLPSpanExporter._client` (`_OTLPHTTPClient`) and its `export(data)`, which compresses,
  posts and retries, returning a result with `success`;
- `OTLPSpanExporter._max_request_size`, the size past which the SDK drops a batch rather
  than send it (a collector refuses it anyway).

tests/fence/test_otel_private.py checks each against the installed SDK: an upgrade that
changes one fails a test naming it. Only the exporter process imports this module.
"""

from __future__ import annotations

import logging

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

log = logging.getLogger("mendpoint.tracing")


def send_serialized(exporter: OTLPSpanExporter, data: bytes) -> bool:
    """Send one serialized `ExportTraceServiceRequest` as the exporter sends its own."""
    limit = exporter._max_request_size
    if limit > 0 and len(data) > limit:  # the SDK's rule: 0 or less is no limit
        log.warning("a span batch of %d bytes is over max_request_size: dropped", len(data))
        return False
    return bool(exporter._client.export(data).success)


__all__ = ["send_serialized"]
