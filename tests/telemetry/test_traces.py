"""Traces of HTTP exchanges, received by a real OTLP/HTTP collector (docs/operations.md#traces).

The receiver (`tests.support.otlp`) decodes what the gateway's OpenTelemetry exporter sends
with the official protobuf messages. A failing request carries every attribute the docs list
and is parented to the caller's `traceparent`; the upstream sees the gateway's client span as
its parent; a replay is a second client span with `http.request.resend_count`; answers are the
same with tracing on as direct; a collector that is gone or hangs costs no request anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.telemetry import spans
from gateway.telemetry.tracing import TRACING, TraceSettings, traces_url, wanted
from tests.support.faultserver import closed_port_url
from tests.support.gateway import StartGateway, StartRaw, StartUpstream, write_config
from tests.support.otlp import (
    CLIENT,
    SERVER,
    STATUS_ERROR,
    OtlpReceiver,
    caller_context,
    flushed,
)
from tests.support.paths import REPO

RULE = {
    "id": "orders-down",
    "match": {"status": [503], "path": "/orders", "methods": ["GET"]},
    "error": {
        "code": "ORDERS_DOWN",
        "category": "UNAVAILABLE",
        "retryable": True,
        "retry_after_ms": {"header": "Retry-After", "default": 1000},
        "recovery_intent": "capacity_wait",
    },
}
SKILL = {
    "name": "orders.wait_for_capacity",
    "version": "1.0.0",
    "recovers": ["capacity_wait"],
    "repair": "inspect",
    "purpose": "Wait until the orders service has capacity again.",
}
SMALL_ERROR = b'{"error": "orders are paused"}'
LARGE_ERROR = b'{"error": "' + b"x" * 4000 + b'"}'


@pytest.fixture(autouse=True)
def quick_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches every 50 ms instead of 5 s: the test waits for spans, never sleeps a guess."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    running = await OtlpReceiver().start()
    yield running
    await asyncio.to_thread(TRACING.stop)  # the last spans, before the collector goes
    await running.close()


class Orders:
    """An upstream whose /orders fails with 503 (small body, then one over the error cap),
    keeping the `traceparent` each request brought."""

    def __init__(self) -> None:
        self.traceparents: list[str | None] = []

    def app(self) -> web.Application:
        async def orders(request: web.Request) -> web.Response:
            self.traceparents.append(request.headers.get("traceparent"))
            body = SMALL_ERROR if len(self.traceparents) == 1 else LARGE_ERROR
            return web.Response(
                status=503,
                body=body,
                content_type="application/json",
                headers={"Retry-After": "30"},
            )

        async def ok(request: web.Request) -> web.Response:
            self.traceparents.append(request.headers.get("traceparent"))
            return web.json_response({"ok": True, "path": request.path_qs})

        app = web.Application()
        app.router.add_get("/orders", orders)
        app.router.add_get("/ok", ok)
        return app


def traced(upstream: str, collector: str, **extra: Any) -> dict[str, Any]:
    return {
        "routes": [{"name": "orders-api", "prefix": "/", "upstream": upstream}],
        "limits": {"error_body_bytes": 1024},
        "rules": [RULE],
        "skills": [SKILL],
        "telemetry": {"otlp_endpoint": collector, "service_name": "edge-gateway", **extra},
    }


async def test_a_failing_request_carries_every_attribute_parented_to_its_caller(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    receiver: OtlpReceiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    orders = Orders()
    gateway = await start_gateway(traced(await start_upstream(orders.app()), receiver.url))
    trace_id, caller_span, traceparent = caller_context()
    headers = {"traceparent": traceparent, "tracestate": "vendor=abc"}
    with caplog.at_level(logging.INFO, logger="mendpoint.access"):
        for _ in range(2):  # the second is a retry 30 s too early, whose error is too large
            async with gateway.session.get(
                gateway.url + "/orders?token=s3cret", headers=headers
            ) as r:
                assert r.status == 503
                await r.read()
    await flushed(receiver, 4)
    servers = sorted(receiver.by_kind(SERVER), key=lambda s: s.attributes["mendpoint.request.id"])
    clients = receiver.by_kind(CLIENT)
    assert len(servers) == 2 and len(clients) == 2
    first, retry = (
        next(s for s in servers if "mendpoint.followup.outcome" not in s.attributes),
        next(s for s in servers if "mendpoint.followup.outcome" in s.attributes),
    )
    for span in servers:
        assert span.trace_id == trace_id and span.parent_span_id == caller_span
        assert span.name == "GET orders-api"
        assert span.resource["service.name"] == "edge-gateway"
        assert span.status_code == STATUS_ERROR
        attributes = span.attributes
        assert attributes["http.request.method"] == "GET"
        assert attributes["http.route"] == "orders-api"
        assert attributes["http.response.status_code"] == 503
        assert attributes["error.type"] == "503"
        assert attributes["server.address"] == "127.0.0.1"
        assert attributes["url.path"] == "/orders"  # never the query
        assert "s3cret" not in repr(attributes)
        assert attributes["mendpoint.rule.id"] == "orders-down"
        assert attributes["mendpoint.failure.code"] == "ORDERS_DOWN"
        assert attributes["mendpoint.failure.category"] == "UNAVAILABLE"
        assert attributes["mendpoint.failure.retryable"] is True
        assert attributes["mendpoint.failure.retry_after_ms"] == 30_000
        # The retry's error body is over the cap: it can be answered in `headers` at most.
        assert attributes["mendpoint.mode"] == ("additive" if span is first else "headers")
        assert attributes["mendpoint.resolution.outcome"] == "options"
        (event,) = span.events
        assert event[0] == "mendpoint.failure"
        assert event[1]["mendpoint.failure.code"] == "ORDERS_DOWN"
        assert event[1]["mendpoint.rule.id"] == "orders-down"
    assert "mendpoint.fallback.reason" not in first.attributes
    assert retry.attributes["mendpoint.fallback.reason"] == "body_too_large"
    assert retry.attributes["mendpoint.followup.outcome"] == "retried_too_early"
    # One client span per attempt, each the child of its exchange and the upstream's parent.
    for client in clients:
        assert client.trace_id == trace_id
        assert client.parent_span_id in {s.span_id for s in servers}
        assert client.name == "GET"
        assert client.attributes["http.request.method"] == "GET"
        assert client.attributes["server.address"] == "127.0.0.1"
        assert client.attributes["http.response.status_code"] == 503
        assert client.attributes["error.type"] == "503"
        assert "?" not in client.attributes["url.full"]
        assert "http.request.resend_count" not in client.attributes
    assert sorted(orders.traceparents) == sorted(  # type: ignore[type-var]
        f"00-{trace_id}-{c.span_id}-01" for c in clients
    )
    # The access line carries the ids of its exchange's span.
    lines = [r for r in caplog.records if r.name == "mendpoint.access"]
    logged = {(r.fields["trace_id"], r.fields["span_id"]) for r in lines}  # type: ignore[attr-defined]
    assert logged == {(trace_id, s.span_id) for s in servers}


async def test_a_replay_is_a_second_client_span_with_its_resend_count(
    start_gateway: StartGateway, start_raw: StartRaw, receiver: OtlpReceiver
) -> None:
    """The upstream answers on a kept-alive connection, then closes it as the next request
    arrives: the gateway sends that request once more, on a fresh connection."""
    seen: list[bytes] = []

    async def keep_then_drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(head)
            if len(seen) == 2:
                return  # closes without answering
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    upstream = await start_raw(keep_then_drop)
    gateway = await start_gateway(
        {
            "routes": [{"name": "raw", "prefix": "/", "upstream": upstream.url}],
            "telemetry": {"otlp_endpoint": receiver.url},
        }
    )
    for _ in range(2):
        async with gateway.session.get(gateway.url + "/thing") as r:
            assert r.status == 200
            assert await r.read() == b"ok"
    await flushed(receiver, 5)
    clients = receiver.by_kind(CLIENT)
    second = [s for s in receiver.by_kind(SERVER) if s.span_id != clients[0].parent_span_id]
    attempts = [c for c in clients if c.parent_span_id == second[0].span_id]
    assert [a.attributes.get("http.request.resend_count") for a in attempts] == [None, 1]
    assert attempts[0].status_code == STATUS_ERROR
    assert attempts[0].attributes["error.type"] == "ServerDisconnectedError"
    assert attempts[1].attributes["http.response.status_code"] == 200
    assert receiver.spans[0].resource["service.name"] == "mendpoint"
    # Each attempt told the upstream its own span as the parent.
    parents = [line for head in seen for line in head.split(b"\r\n") if b"traceparent" in line]
    assert {p.split(b"-")[2].decode() for p in parents} == {c.span_id for c in clients}


async def test_answers_with_tracing_on_are_the_answers_direct(
    start_gateway: StartGateway, start_upstream: StartUpstream, receiver: OtlpReceiver
) -> None:
    """Status, body and every header but the hop's own (Date, Server, Via, X-Request-Id)."""
    orders = Orders()
    upstream = await start_upstream(orders.app())
    gateway = await start_gateway(
        {**traced(upstream, receiver.url), "routes": [_route(upstream, "original")]}
    )
    _, _, traceparent = caller_context()
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for path in ("/ok?x=1", "/orders"):
            answers = []
            for base in (upstream, gateway.url):
                headers = {"traceparent": traceparent}
                async with session.get(base + path, headers=headers) as r:
                    kept = {k: v for k, v in r.headers.items() if k.lower() not in HOP_HEADERS}
                    answers.append((r.status, kept, await r.read()))
            assert answers[0] == answers[1], path
    await flushed(receiver, 4)


HOP_HEADERS = {"date", "server", "via", "x-request-id"}
"""What the gateway adds to every answer (docs/transparency.md), tracing on or off."""


def _route(upstream: str, mode: str) -> dict[str, Any]:
    return {"name": "orders-api", "prefix": "/", "upstream": upstream, "mode": mode}


@pytest.mark.parametrize("collector", ["closed", "hangs"])
async def test_a_collector_that_is_gone_or_hangs_costs_no_request_anything(
    collector: str, start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    """Each request is answered as fast as with tracing off; stopping waits for no export."""
    hanging = await OtlpReceiver(hang=True).start() if collector == "hangs" else None
    url = hanging.url if hanging is not None else closed_port_url()
    orders = Orders()
    upstream = await start_upstream(orders.app())
    try:
        gateway = await start_gateway(traced(upstream, url))
        slowest = 0.0
        for _ in range(40):
            begun = time.monotonic()
            async with gateway.session.get(gateway.url + "/ok") as r:
                assert r.status == 200
                await r.read()
            slowest = max(slowest, time.monotonic() - begun)
            await asyncio.sleep(0.005)  # across several batches
        assert slowest < 0.5, slowest
        if hanging is not None:
            assert hanging.posts >= 1  # the exporter did try, and is still waiting
        begun = time.monotonic()
        await gateway.server.stop()
        assert time.monotonic() - begun < 5
        assert not TRACING.on
    finally:
        if hanging is not None:
            await hanging.close()


def test_without_telemetry_the_sdk_is_never_imported(tmp_path: Path) -> None:
    """A real gateway process serving requests with tracing off loads no OpenTelemetry."""
    script = """
import asyncio, sys, aiohttp
from aiohttp import web
from gateway.serve.app import GatewayServer
from gateway.config.loader import load_config

async def main():
    app = web.Application()
    app.router.add_get("/", lambda r: web.Response(text="up"))
    runner = web.AppRunner(app); await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0); await site.start()
    port = site._server.sockets[0].getsockname()[1]
    open(sys.argv[1], "w").write(
        f"routes: [{{name: a, prefix: /, upstream: 'http://127.0.0.1:{port}'}}]\\n")
    server = GatewayServer(load_config(sys.argv[1]))
    host, gport = await server.start("127.0.0.1:0")
    async with aiohttp.ClientSession() as s:
        for _ in range(3):
            async with s.get(f"http://{host}:{gport}/") as r:
                assert (await r.text()) == "up"
    await server.stop(); await runner.cleanup()
    print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "gateway.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_standard_variables_turn_tracing_on_and_off() -> None:
    none = TraceSettings()
    assert not wanted(none, {})
    assert wanted(none, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert wanted(none, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    configured = TraceSettings(otlp_endpoint="http://127.0.0.1:4318")
    assert wanted(configured, {})
    assert not wanted(configured, {"OTEL_SDK_DISABLED": "true"})
    assert not wanted(configured, {"OTEL_TRACES_EXPORTER": "none"})
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp/v1/traces") == "https://c/otlp/v1/traces"


@pytest.mark.parametrize(
    ("telemetry", "field"),
    [
        ("{otlp_endpoint: 'ftp://collector'}", "otlp_endpoint"),
        ("{sample_ratio: 1.5}", "sample_ratio"),
        ("{headers: {'bad name': x}}", "headers"),
        ("{exporter: grpc}", "exporter"),
    ],
)
def test_a_bad_telemetry_block_is_a_config_error_with_its_line(
    telemetry: str, field: str, tmp_path: Any
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "routes:\n  - {name: a, prefix: /, upstream: 'http://127.0.0.1:9'}\n"
        f"telemetry: {telemetry}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    message = str(caught.value)
    assert f"{path}:3" in message and field in message, message


def test_a_telemetry_block_loads(tmp_path: Any) -> None:
    path = write_config(
        tmp_path,
        {
            "routes": [{"name": "a", "prefix": "/", "upstream": "http://127.0.0.1:9"}],
            "telemetry": {
                "otlp_endpoint": "http://127.0.0.1:4318",
                "service_name": "gw",
                "sample_ratio": 0.25,
                "headers": {"X-Tenant": "blue"},
            },
        },
    )
    spec = load_config(str(path)).config.telemetry
    assert (spec.otlp_endpoint, spec.service_name, spec.sample_ratio) == (
        "http://127.0.0.1:4318",
        "gw",
        0.25,
    )
    assert spec.headers == {"X-Tenant": "blue"}


def test_without_the_sdk_a_collector_is_a_config_error_and_the_variables_a_warning(
    tmp_path: Path,
) -> None:
    """A real interpreter that has every installed package but OpenTelemetry's."""
    site = Path(aiohttp.__file__).parent.parent
    bare = tmp_path / "site"
    bare.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith("opentelemetry"):
            (bare / entry.name).symlink_to(entry)
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "routes: [{name: a, prefix: /, upstream: 'http://127.0.0.1:9'}]\n"
        "telemetry:\n  otlp_endpoint: http://127.0.0.1:4318\n"
    )
    script = """
import importlib.util, logging, site, sys
site.addsitedir(sys.argv[2])  # its .pth files: the editable install's finder
from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.telemetry.tracing import Tracing, TraceSettings
assert importlib.util.find_spec("opentelemetry") is None
try:
    load_config(sys.argv[1])
except ConfigError as exc:
    print(exc)
logging.basicConfig(level=logging.WARNING, format="%(message)s")
variables = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
print("on" if Tracing().start(TraceSettings(), variables) else "off")
"""
    done = subprocess.run(
        [sys.executable, "-S", "-c", script, str(config), str(bare)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    error, state = done.stdout.strip().splitlines()
    assert f"{config}:3" in error and "telemetry.otlp_endpoint" in error, error
    assert "pip install 'mendpoint[otel]'" in error
    assert state == "off"
    assert "mendpoint[otel]" in done.stderr  # the warning for the variables alone


async def test_a_trace_that_fails_never_fails_its_request(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every span the exchange would make raises: the answers are those of tracing off."""

    def broken(self: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(spans.ExchangeTrace, "_server_span", broken)
    orders = Orders()
    gateway = await start_gateway(traced(await start_upstream(orders.app()), receiver.url))
    for path, status in (("/orders", 503), ("/ok", 200)):
        async with gateway.session.get(gateway.url + path) as r:
            assert r.status == status
            body = await r.read()
        assert (b'"ok": true' in body) if status == 200 else (b"ORDERS_DOWN" in body), body
