"""`[::]` takes IPv4 and IPv6 clients alike, on every listener.

asyncio binds IPv6 sockets with IPV6_V6ONLY on, so before, a gateway on `[::]:PORT` refused
127.0.0.1. Each listener is reached here over 127.0.0.1 and over ::1: the data listener and
the admin listener of one process, the workers' shared port and the supervisor's admin
listener, and `mendpoint resolver` (docs/configuration.md#listen-addresses).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.serve import workers
from tests.support.gateway import StartGateway, StartUpstream, route_config, supervised, wait_ready
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.secrets import write_secret


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not has_ipv6_loopback(), reason="this machine has no IPv6 loopback (::1): nothing to test"
)
CLIENTS = ("127.0.0.1", "[::1]")


def forwarded_for(seen: list[str]) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("X-Forwarded-For", ""))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


async def get(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        await response.read()
        return response.status


async def test_one_gateway_on_any_ipv6_serves_both_families(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    seen: list[str] = []
    upstream = await start_upstream(forwarded_for(seen))
    gateway = await start_gateway(route_config(upstream), listen="[::]:0", admin="[::]:0")
    port = gateway.url.rsplit(":", 1)[1]
    assert gateway.server.admin_address is not None
    admin_port = gateway.server.admin_address[1]
    for client in CLIENTS:
        assert await get(f"http://{client}:{port}/x") == 200, client
        assert await get(f"http://{client}:{admin_port}/healthz") == 200, client
    # An IPv4 client is named as an IPv4 listener would name it, not as ::ffff:127.0.0.1.
    assert seen == ["127.0.0.1", "::1"]


@pytest.mark.skipif(not workers.supported(), reason="--workers needs Linux")
async def test_workers_and_their_supervisor_on_any_ipv6_serve_both_families(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(forwarded_for([]))
    port, admin = free_port(), free_port()
    config = {**route_config(upstream), "listen": f"[::]:{port}", "admin": f"[::]:{admin}"}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    async with supervised(path, f"127.0.0.1:{admin}", tmp_path):
        for client in CLIENTS:
            assert await get(f"http://{client}:{port}/x") == 200, client
            assert await get(f"http://{client}:{admin}/readyz") == 200, client


RESOLVE = {
    "failure": {"category": "VALIDATION_ERROR", "code": "X", "intent": "format_inspection"},
    "caller": {"scopes": []},
    "context": {"operation": "POST /v1/csv"},
}


async def test_the_resolver_on_any_ipv6_serves_both_families(tmp_path: Path) -> None:
    token = "4f6c1a0e9b2d7c3e8a5f1b0c6d2e9a7f"
    write_secret(tmp_path / "token", token + "\n")
    (tmp_path / "catalog.yaml").write_text("skills: []\n")
    port = free_port()
    log = tmp_path / "resolver.log"
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "gateway", "resolver", "--config", str(tmp_path / "catalog.yaml")),
            *("--listen", f"[::]:{port}", "--token-file", str(tmp_path / "token")),
            cwd=REPO,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://[::1]:{port}/healthz", process, log, ready_s=30)
        headers = {"Authorization": f"Bearer {token}"}
        for client in CLIENTS:
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    f"http://{client}:{port}/v1/resolve", json=RESOLVE, headers=headers
                ) as response,
            ):
                assert response.status == 200, client
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
