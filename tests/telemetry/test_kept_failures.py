"""Every failure traced, successes sampled (docs/operations.md#traces), against a real OTLP/HTTP
receiver.

At `sample_ratio: 0` a failing HTTP request (and a failing MCP tool call:
tests/mcp/test_mcp_traces.py) still arrives whole (the
server span and its client spans, every attribute, `mendpoint.sampled_for: failure`, parented
to the caller's `traceparent`) and a success does not; at `0.1` about a tenth of successes
arrive; past `max_kept_failures_per_s` the sampler's word stands, counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from gateway.telemetry.metrics import TRACES_KEPT
from gateway.telemetry.tracing import TRACING
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream
from tests.support.otlp import CLIENT, SERVER, OtlpReceiver, Received, caller_context, flushed

KEPT_FOR = "mendpoint.sampled_for"


@pytest.fixture(autouse=True)
def quick_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    running = await OtlpReceiver().start()
    yield running
    await asyncio.to_thread(TRACING.stop)
    await running.close()


def upstream_app(seen: list[str | None]) -> web.Application:
    """`/ok` answers 200, `/missing` 404 with a JSON message; each keeps its traceparent."""

    async def ok(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.json_response({"ok": True})

    async def missing(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.json_response({"message": "no such order"}, status=404)

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/missing", missing)
    return app


def config(upstream: str, collector: str, **telemetry: Any) -> dict[str, Any]:
    return {
        "routes": [{"name": "orders", "prefix": "/", "upstream": upstream}],
        "telemetry": {"otlp_endpoint": collector, **telemetry},
    }


async def get(gateway: RunningGateway, path: str, **headers: str) -> int:
    async with gateway.session.get(gateway.url + path, headers=headers) as response:
        await response.read()
        return response.status


async def settled(receiver: OtlpReceiver, at_least: int, quiet_s: float = 0.3) -> list[Received]:
    """What arrived once the exporter has sent everything and nothing more comes."""
    await flushed(receiver, at_least)
    count = -1
    while count != len(receiver.spans):
        count = len(receiver.spans)
        await asyncio.sleep(quiet_s)
    return receiver.spans


def kept_outcomes() -> dict[str, float]:
    return {o: TRACES_KEPT.labels(outcome=o)._value.get() for o in ("kept", "over_limit")}


async def test_at_ratio_zero_a_failure_arrives_whole_and_a_success_not(
    start_gateway: StartGateway, start_upstream: StartUpstream, receiver: OtlpReceiver
) -> None:
    seen: list[str | None] = []
    upstream = await start_upstream(upstream_app(seen))
    gateway = await start_gateway(config(upstream, receiver.url, sample_ratio=0))
    trace_id, caller_span, _ = caller_context()
    unsampled = f"00-{trace_id}-{caller_span}-00"  # the caller did not sample it either
    before = kept_outcomes()
    for _ in range(5):
        assert await get(gateway, "/ok") == 200
    assert await get(gateway, "/missing", traceparent=unsampled) == 404
    spans = await settled(receiver, 2)
    assert len(spans) == 2, [s.name for s in spans]
    (server,) = [s for s in spans if s.kind == SERVER]
    (client,) = [s for s in spans if s.kind == CLIENT]
    assert server.trace_id == trace_id and server.parent_span_id == caller_span
    assert client.trace_id == trace_id and client.parent_span_id == server.span_id
    assert server.attributes[KEPT_FOR] == "failure"
    assert server.attributes["mendpoint.failure.code"] == "NOT_FOUND"
    assert server.attributes["http.response.status_code"] == 404
    assert server.attributes["url.path"] == "/missing"
    assert [e[0] for e in server.events] == ["mendpoint.failure"]
    assert client.attributes["http.response.status_code"] == 404
    assert client.attributes["error.type"] == "404"
    # Kept after the fact: its spans have the times they happened at, in order.
    # The upstream's parent was the exchange, unsampled, as the head sampler decided.
    assert seen[-1] == f"00-{trace_id}-{server.span_id}-00"
    assert all(tp is not None and tp.endswith("-00") for tp in seen)
    after = kept_outcomes()
    assert after["kept"] - before["kept"] == 1 and after["over_limit"] == before["over_limit"]


async def test_past_the_budget_the_sampler_decides_and_it_is_counted(
    start_gateway: StartGateway, start_upstream: StartUpstream, receiver: OtlpReceiver
) -> None:
    upstream = await start_upstream(upstream_app([]))
    settings = {"sample_ratio": 0, "max_kept_failures_per_s": 2}
    gateway = await start_gateway(config(upstream, receiver.url, **settings))
    before = kept_outcomes()
    for _ in range(12):
        assert await get(gateway, "/missing") == 404
    spans = await settled(receiver, 2)
    after = kept_outcomes()
    kept = after["kept"] - before["kept"]
    over = after["over_limit"] - before["over_limit"]
    assert kept + over == 12 and 2 <= kept <= 4, (kept, over)  # a burst keeps about per_s
    assert len([s for s in spans if s.kind == SERVER]) == kept


async def test_without_keep_failures_the_sampler_alone_decides(
    start_gateway: StartGateway, start_upstream: StartUpstream, receiver: OtlpReceiver
) -> None:
    upstream = await start_upstream(upstream_app([]))
    settings = {"sample_ratio": 0, "keep_failures": False}
    gateway = await start_gateway(config(upstream, receiver.url, **settings))
    for _ in range(3):
        assert await get(gateway, "/missing") == 404
    # A sampled caller is still followed: the one trace that arrives is its.
    trace_id, _, traceparent = caller_context()
    assert await get(gateway, "/ok", traceparent=traceparent) == 200
    spans = await settled(receiver, 2)
    assert {s.trace_id for s in spans} == {trace_id}
    assert all(KEPT_FOR not in s.attributes for s in spans)


async def test_at_a_tenth_about_a_tenth_of_successes_arrive(
    start_gateway: StartGateway, start_upstream: StartUpstream, receiver: OtlpReceiver
) -> None:
    upstream = await start_upstream(upstream_app([]))
    gateway = await start_gateway(config(upstream, receiver.url, sample_ratio=0.1))
    sent = 400
    for _ in range(sent):
        assert await get(gateway, "/ok") == 200
    await asyncio.to_thread(TRACING.force_flush)
    await asyncio.sleep(0.5)
    servers = [s for s in await settled(receiver, 1) if s.kind == SERVER]
    # Binomial(400, 0.1): mean 40, standard deviation 6; 16..70 is beyond four of them.
    assert 16 <= len(servers) <= 70, len(servers)
    assert all(KEPT_FOR not in s.attributes for s in servers)
