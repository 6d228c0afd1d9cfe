"""The exporter process behind the gateway's traces (docs/operations.md#traces).

The gateway records spans as plain data and writes them, without waiting, to an exporter
process of its own that builds the SDK's spans and exports them over OTLP. That process must
never hold a request (a stopped one fills a bounded backlog, then spans are dropped and
counted) and must not outlive the gateway.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web

from gateway.telemetry import span_pipe
from gateway.telemetry.tracing import TRACING
from tests.support.gateway import StartGateway, StartUpstream
from tests.support.otlp import SERVER, OtlpReceiver, flushed
from tests.support.paths import REPO
from tests.support.waits import patience


def ok_app() -> web.Application:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/{tail:.*}", ok)
    return app


@pytest.fixture(autouse=True)
def quick_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


async def test_a_stopped_exporter_drops_spans_and_holds_no_request(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(span_pipe, "BACKLOG_BYTES", 16 << 10)  # drops after the pipe's 64 KiB
    receiver = await OtlpReceiver().start()
    try:
        config = {
            "routes": [{"name": "api", "prefix": "/", "upstream": await start_upstream(ok_app())}],
            "telemetry": {"otlp_endpoint": receiver.url},
        }
        gateway = await start_gateway(config)
        pipe = TRACING.exporter
        assert pipe is not None
        os.kill(pipe.exporter_pid, signal.SIGSTOP)
        try:
            slowest = 0.0
            for index in range(400):
                begun = time.monotonic()
                async with gateway.session.get(f"{gateway.url}/stopped/{index}") as r:
                    assert r.status == 200
                    await r.read()
                slowest = max(slowest, time.monotonic() - begun)
                if index % 50 == 0:
                    await asyncio.sleep(0.15)  # a flush tick: the pipe fills, then the backlog
            assert slowest < 0.5, slowest
            assert pipe.dropped > 0
        finally:
            os.kill(pipe.exporter_pid, signal.SIGCONT)
        await flushed(receiver, 1)
        kept = {s.attributes["url.path"] for s in receiver.by_kind(SERVER)}
        assert "/stopped/0" in kept  # what the pipe held while the exporter was stopped
        assert pipe.dropped + 2 * len(kept) <= 800 + 2  # the rest dropped, not queued forever
        async with gateway.session.get(f"{gateway.url}/after") as r:  # resumed: spans flow again
            assert r.status == 200
        deadline = time.monotonic() + 10
        while "/after" not in {s.attributes["url.path"] for s in receiver.by_kind(SERVER)}:
            assert time.monotonic() < deadline, "no span after the exporter resumed"
            await flushed(receiver, 1)
            await asyncio.sleep(0.1)
    finally:
        await asyncio.to_thread(TRACING.stop)
        await receiver.close()


def test_the_exporter_does_not_outlive_its_gateway(tmp_path: Path) -> None:
    """A gateway killed outright: its exporter reads the end of its pipe and exits."""
    script = """
import sys, time
from gateway.telemetry.tracing import TRACING, TraceSettings
assert TRACING.start(TraceSettings(otlp_endpoint="http://127.0.0.1:9"))
print(TRACING.exporter.exporter_pid, flush=True)
time.sleep(60)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    gateway = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert gateway.stdout is not None
        exporter = int(gateway.stdout.readline())
        assert _alive(exporter)
    finally:
        gateway.kill()
        gateway.wait()
        if gateway.stdout is not None:
            gateway.stdout.close()
    deadline = time.monotonic() + patience(15)
    while _alive(exporter):
        assert time.monotonic() < deadline, "the exporter outlived its gateway"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
