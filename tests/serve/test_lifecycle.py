"""The gateway process as an operator runs it: environment overrides, SIGHUP reload and a
graceful SIGTERM drain that lets in-flight requests finish and exits 0."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from tests.support.gateway import (
    StartUpstream,
    slow_gone_app,
    start_process,
    stop_process,
    wait_ready,
)
from tests.support.ports import free_port


async def test_environment_overrides_configure_the_embedded_gateway(
    start_upstream: StartUpstream,
) -> None:
    upstream = await start_upstream(slow_gone_app())
    port, admin = free_port(), free_port()
    process = await start_process(
        "serve",
        env={
            "MENDPOINT_UPSTREAM": upstream,
            "MENDPOINT_LISTEN": f"127.0.0.1:{port}",
            "MENDPOINT_ADMIN": f"127.0.0.1:{admin}",
            "MENDPOINT_MODE": "envelope",
            "MENDPOINT_LOG_FORMAT": "json",
        },
    )
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz")
            async with session.get(f"http://127.0.0.1:{port}/x") as response:
                body = await response.json()
            assert response.status == 410
            assert body["ok"] is False and body["error"]["code"] == "GONE"
    finally:
        code, stderr = await stop_process(process)
    assert code == 0
    assert '"logger":"mendpoint.access"' in stderr and '"route":"default"' in stderr


async def test_sighup_reloads_and_sigterm_drains(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(slow_gone_app())
    port, admin = free_port(), free_port()
    data: dict[str, Any] = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [{"name": "api", "upstream": upstream}],
        "rules": [
            {
                "id": "gone",
                "match": {"status": [410]},
                "error": {"code": "FIRST", "category": "NOT_FOUND"},
            }
        ],
        "shutdown": {"drain_delay_s": 0.6, "grace_s": 10},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    process = await start_process("serve", "--config", str(path))
    base, admin_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, admin_url + "/readyz")
            async with session.get(base + "/a") as response:
                assert (await response.json())["error"]["code"] == "FIRST"
            data["rules"][0]["error"]["code"] = "SECOND"
            path.write_text(yaml.safe_dump(data))
            process.send_signal(signal.SIGHUP)
            for _ in range(100):
                async with session.get(base + "/a") as response:
                    if (await response.json())["error"]["code"] == "SECOND":
                        break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("SIGHUP did not reload")

            in_flight = asyncio.create_task(session.get(base + "/slow"))
            await asyncio.sleep(0.2)
            process.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.2)
            async with session.get(admin_url + "/readyz") as ready:
                assert ready.status == 503  # draining: not ready, still serving
            async with session.get(base + "/a") as during:
                assert during.status == 410
            response = await in_flight
            assert response.status == 410
            assert (await response.json())["error"]["code"] == "SECOND"
            response.release()
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr
    assert "config reloaded" in stderr


def echo_app() -> web.Application:
    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            await ws.send_str("echo:" + message.data)
        return ws

    app = web.Application()
    app.router.add_get("/ws", echo)
    return app


async def test_an_open_tunnel_is_in_flight_until_the_grace_ends(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """A WebSocket tunnel keeps working through the drain and is closed when `grace_s` runs
    out; the process still exits 0 (docs/transparency.md, Limits on tunnels)."""
    upstream = await start_upstream(echo_app())
    port, admin = free_port(), free_port()
    grace = 1.5
    data = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [{"name": "api", "upstream": upstream}],
        "shutdown": {"drain_delay_s": 0.2, "grace_s": grace},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    process = await start_process("serve", "--config", str(path))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz")
            async with session.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                await ws.send_str("before")
                assert (await ws.receive_str()) == "echo:before"
                stopping = time.monotonic()
                process.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.5)  # past the drain delay, inside the grace
                await ws.send_str("during")
                assert (await ws.receive_str(timeout=5)) == "echo:during"
                closed = await ws.receive(timeout=grace + 10)
                lasted = time.monotonic() - stopping
            assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert lasted >= grace
        await asyncio.wait_for(process.wait(), 20)  # it stops by itself: SIGTERM was sent
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr
