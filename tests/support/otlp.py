"""A real OTLP/HTTP trace receiver on loopback, decoding with the official protobuf messages.

`OtlpReceiver` answers `POST /v1/traces` as a collector does (an `ExportTraceServiceResponse`)
and keeps every span it was sent, flattened to `Received` with its attributes as Python values;
`hang=True` makes it a collector that accepts the request and never answers.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from gateway.telemetry.tracing import TRACING
from tests.support.waits import patience

PROTOBUF = "application/x-protobuf"
SERVER, CLIENT = Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CLIENT
STATUS_ERROR = 2


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind is not None else None


@dataclass(frozen=True)
class Received:
    """One span as the collector got it (ids as lowercase hex, as W3C writes them)."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str]]
    resource: dict[str, Any]


def flatten(request: ExportTraceServiceRequest) -> list[Received]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                spans.append(
                    Received(
                        name=span.name,
                        kind=span.kind,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={a.key: value_of(a.value) for a in span.attributes},
                        status_code=span.status.code,
                        events=[
                            (e.name, {a.key: value_of(a.value) for a in e.attributes})
                            for e in span.events
                        ],
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        resource=resource,
                    )
                )
    return spans


@dataclass
class OtlpReceiver:
    hang: bool = False
    spans: list[Received] = field(default_factory=list)
    posts: int = 0
    url: str = ""
    _runner: web.AppRunner | None = None
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> OtlpReceiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        self.posts += 1
        if self.hang:
            await self._released.wait()
        body = await request.read()
        assert request.content_type == PROTOBUF, request.content_type
        self.spans.extend(flatten(ExportTraceServiceRequest.FromString(body)))
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type=PROTOBUF
        )

    async def wait_for(self, count: int, timeout_s: float = 15) -> list[Received]:
        """At least `count` spans, waiting until they arrive (the exporter batches them)."""
        deadline = time.monotonic() + patience(timeout_s)
        while len(self.spans) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.spans)} spans arrived, expected {count}")
            await asyncio.sleep(0.02)
        return self.spans

    def by_kind(self, kind: int) -> list[Received]:
        return [s for s in self.spans if s.kind == kind]


def caller_context() -> tuple[str, str, str]:
    """A caller's trace id, span id and the `traceparent` naming them (sampled)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


async def flushed(receiver: OtlpReceiver, count: int) -> list[Received]:
    """The gateway's queued spans exported now, and at least `count` of them received."""
    assert await asyncio.to_thread(TRACING.force_flush)
    return await receiver.wait_for(count)
