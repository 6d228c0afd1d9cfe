"""Each private name of the OpenTelemetry exporter the gateway relies on, checked against the
installed SDK (gateway/fence/otel_private.py holds them; the last test keeps it the only one).
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from gateway.fence.otel_private import send_serialized
from gateway.telemetry.otlp_records import Encoder
from gateway.telemetry.span_export import SCOPE, resource_for
from tests.support.otlp import OtlpReceiver
from tests.support.paths import PACKAGE

EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter.OTLPSpanExporter"
RECORD: tuple[object, ...] = (
    "GET",
    1,
    0xABC,
    7,
    None,
    False,
    1,
    None,
    10,
    20,
    {"a": "b"},
    [],
    [],
    False,
)


def test_the_exporter_keeps_a_client_that_sends_bytes() -> None:
    exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    client = getattr(exporter, "_client", None)
    assert callable(getattr(client, "export", None)), f"{EXPORTER}._client.export is gone"
    limit = getattr(exporter, "_max_request_size", None)
    assert isinstance(limit, int), f"{EXPORTER}._max_request_size is gone"
    exporter.shutdown()  # type: ignore[no-untyped-call]


async def test_send_serialized_delivers_what_the_encoder_wrote() -> None:
    receiver = await OtlpReceiver().start()
    try:
        exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")
        data = Encoder(resource_for("fenced"), SCOPE).request([RECORD]).SerializeToString()
        assert await asyncio.to_thread(send_serialized, exporter, data)
        (span,) = await receiver.wait_for(1)
        assert span.trace_id == f"{0xABC:032x}" and span.resource["service.name"] == "fenced"
        exporter.shutdown()  # type: ignore[no-untyped-call]
    finally:
        await receiver.close()


def test_a_batch_over_the_size_limit_is_not_sent() -> None:
    exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces", max_request_size=10)
    assert not send_serialized(exporter, b"x" * 11)
    exporter.shutdown()  # type: ignore[no-untyped-call]


OTHERS = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "otel_private.py")


def private_uses(tree: ast.AST) -> set[str]:
    """`…._client.export` (the exporter's client: the gateway's own `_client` methods are
    called, never read for an `export`) and `…._max_request_size`."""
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr == "_max_request_size":
            used.add(node.attr)
        elif (
            node.attr == "export"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "_client"
        ):
            used.add("_client.export")
    return used


def test_the_check_sees_each_name() -> None:
    tree = ast.parse("e._client.export(d)\ne._max_request_size\nself._client()\n")
    assert private_uses(tree) == {"_client.export", "_max_request_size"}


@pytest.mark.parametrize("path", OTHERS, ids=[str(p.relative_to(PACKAGE)) for p in OTHERS])
def test_no_other_module_uses_the_private_names(path: Path) -> None:
    used = private_uses(ast.parse(path.read_text()))
    assert used == set(), "move these into gateway/fence/otel_private.py"
