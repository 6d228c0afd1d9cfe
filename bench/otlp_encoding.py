"""What the trace exporter spends encoding a span: the SDK's way against the gateway's own.

The SDK's way (the exporter's before, and the reference the tests hold the other to): each
record made the SDK's `ReadableSpan`, with its limits, then `encode_spans`. The gateway's:
gateway/telemetry/otlp_records.py's `Encoder`, from the records straight into the same
protobuf messages. CPU µs a span, median of `--rounds` rounds of `--spans` spans (a failing
exchange's server span and client span, as the gateway records them), in one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from gateway.telemetry.otlp_records import Encoder
from gateway.telemetry.span_export import SCOPE, resource_for

Record = tuple[Any, ...]


def sdk_span(record: Record, resource: Any) -> ReadableSpan:
    """The record as the SDK's own span, with the SDK's limits (the old exporter's way)."""
    (name, kind, trace_id, span_id, parent_id, parent_remote, flags, trace_state) = record[:8]
    (start_ns, end_ns, attributes, events, links, error) = record[8:]
    limits = SpanLimits()
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
        resource=resource,
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
        links=[Link(SpanContext(t, s, remote, TraceFlags(f))) for t, s, f, remote in links[:128]],
        kind=SpanKind(kind),
        status=Status(StatusCode.ERROR) if error else Status(StatusCode.UNSET),
        start_time=start_ns,
        end_time=end_ns,
        instrumentation_scope=InstrumentationScope(SCOPE),
    )


def sdk_request(records: list[Record], resource: Resource) -> ExportTraceServiceRequest:
    """The SDK's encoding of `records` (the exporter's before, and the reference)."""
    return encode_spans([sdk_span(r, resource) for r in records])


def failing_exchange(n: int) -> list[Record]:
    """A failing exchange's two spans as the gateway records them, the `n`th of a run."""
    trace_id, server_id = (0xABC << 64) + n, 0x1000 + 2 * n
    server = {
        "http.request.method": "GET",
        "url.path": f"/v1/orders/{n}",
        "url.scheme": "http",
        "network.protocol.version": "1.1",
        "server.address": "127.0.0.1",
        "server.port": 8080,
        "mendpoint.sampled_for": "failure",
        "mendpoint.request.id": f"{n:032x}",
        "mendpoint.failure.code": "ORDER_NOT_FOUND",
        "mendpoint.failure.category": "NOT_FOUND",
        "mendpoint.rule.id": "orders-404",
        "mendpoint.failure.retryable": False,
        "mendpoint.mode": "additive",
        "http.response.status_code": 404,
        "http.route": "orders",
    }
    event = ("mendpoint.failure", 15, {"mendpoint.failure.code": "ORDER_NOT_FOUND"})
    client = {
        "http.request.method": "GET",
        "server.address": "127.0.0.1",
        "server.port": 9000,
        "url.full": f"http://127.0.0.1:9000/v1/orders/{n}",
        "http.response.status_code": 404,
        "error.type": "404",
    }
    return [
        (
            "GET orders",
            1,
            trace_id,
            server_id,
            0x77,
            True,
            1,
            None,
            10,
            30,
            server,
            [event],
            [],
            True,
        ),
        (
            "GET",
            2,
            trace_id,
            server_id + 1,
            server_id,
            False,
            1,
            None,
            12,
            28,
            client,
            [],
            [],
            True,
        ),
    ]


def median_us(encode: Callable[[], bytes], spans: int, rounds: int) -> float:
    per_span = []
    for _ in range(rounds):
        begun = time.process_time()
        encode()
        per_span.append((time.process_time() - begun) / spans * 1e6)
    return statistics.median(per_span)


def measure(spans: int, rounds: int) -> dict[str, float]:
    records = [r for n in range(spans // 2) for r in failing_exchange(n)]
    resource = resource_for("bench")
    encoder = Encoder(resource, SCOPE)
    ways: dict[str, Callable[[], bytes]] = {
        "sdk": lambda: sdk_request(records, resource).SerializePartialToString(),
        "gateway": lambda: encoder.request(records).SerializePartialToString(),
    }
    return {name: median_us(encode, len(records), rounds) for name, encode in ways.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spans", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    result = measure(args.spans, args.rounds)
    json.dump(
        {"median_cpu_us_per_span": result, "ratio": result["sdk"] / result["gateway"]}, sys.stdout
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
