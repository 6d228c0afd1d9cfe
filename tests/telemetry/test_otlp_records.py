"""The exporter's own encoding decodes to the spans the SDK's encoder writes
(gateway/telemetry/otlp_records.py).

The SDK's path is what the exporter did before: each record made a `ReadableSpan` (its
attribute, event and link limits, the resource, the scope) and encoded by `encode_spans`.
For records of every shape the gateway writes (a root span, a caller's remote parent, a
local parent, trace state, events, links, an error, every attribute type), both paths give
the same `ExportTraceServiceRequest`, message for message.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.otlp_encoding import failing_exchange, measure, sdk_request
from gateway.telemetry.otlp_records import Encoder
from gateway.telemetry.span_export import SCOPE, resource_for

Record = tuple[Any, ...]


SERVER_ATTRIBUTES = {
    "http.request.method": "GET",
    "url.path": "/v1/orders/42",
    "url.scheme": "http",
    "server.port": 8080,
    "http.response.status_code": 404,
    "mendpoint.failure.retryable": False,
    "mendpoint.failure.retry_after_ms": 1500,
    "mendpoint.sampled_for": "failure",
    "mendpoint.request.id": "0123456789abcdef0123456789abcdef",
    "some.ratio": 0.25,
    "some.list": ["a", "b"],
    "sørvice.ünicode": "naïve ✓",
}
RECORDS: dict[str, Record] = {
    "root": ("GET orders", 1, 1 << 100, 7, None, False, 1, None, 10, 20, {"a": "b"}, [], [], False),
    "remote-parent": (
        "GET orders",
        1,
        0xABC,
        8,
        99,
        True,
        1,
        "vendor=abc,other=xyz",
        10,
        30,
        dict(SERVER_ATTRIBUTES),
        [("mendpoint.failure", 15, {"mendpoint.failure.code": "NOT_FOUND", "x": True})],
        [(0xDEF, 12, 1, True)],
        True,
    ),
    "local-parent": (
        "GET",
        2,
        0xABC,
        9,
        8,
        False,
        1,
        None,
        11,
        19,
        {"http.request.method": "GET", "error.type": "404", "http.request.resend_count": 1},
        [],
        [],
        True,
    ),
}


@pytest.mark.parametrize("names", [["root"], ["remote-parent"], ["local-parent"], list(RECORDS)])
def test_both_encodings_are_the_same_message(names: list[str]) -> None:
    resource = resource_for("edge-gateway")
    records = [RECORDS[n] for n in names]
    ours = Encoder(resource, SCOPE).request(records)
    theirs = sdk_request(records, resource)
    assert ours == theirs
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )


def test_a_value_repeated_in_a_batch_is_written_once_and_copied() -> None:
    """The saving: a `KeyValue` per distinct value in a batch, each span its own copy."""
    resource = resource_for(None)
    records = [RECORDS["local-parent"]] * 3
    spans = Encoder(resource, SCOPE).request(records).resource_spans[0].scope_spans[0].spans
    first, second = spans[0].attributes[0], spans[1].attributes[0]
    assert first == second and first is not second


def test_the_benchmarks_exchange_encodes_alike_and_is_measured() -> None:
    """bench/otlp_encoding.py, which docs/operations.md quotes, measures the same messages."""
    resource = resource_for("bench")
    records = failing_exchange(3)
    assert Encoder(resource, SCOPE).request(records) == sdk_request(records, resource)
    timings = measure(spans=8, rounds=1)
    assert set(timings) == {"sdk", "gateway"} and all(t > 0 for t in timings.values())
