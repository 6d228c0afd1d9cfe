"""The gateway's own headers never reach an upstream from a client (docs/transparency.md).

`X-Mendpoint-Peer` and `X-Mendpoint-Relay` pass between the gateway's own processes; a
client's copies were forwarded upstream as sent, as if the gateway had said them. Through a
real gateway process, on an HTTP route and an MCP route, from an untrusted client and from a
trusted proxy: the upstream gets neither, and another `X-Mendpoint-*` header as sent.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.gateway import StartUpstream, supervised, write_config
from tests.support.ports import free_port

SENT = {
    "X-Mendpoint-Peer": "203.0.113.7",
    "x-mendpoint-relay": "1700000000.forged",
    "X-Mendpoint-Whatever": "kept",
}


def recorder(seen: list[dict[str, str]]) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        seen.append({k.lower(): v for k, v in request.headers.items()})
        if request.method == "POST":
            return web.json_response({"jsonrpc": "2.0", "id": 1, "result": {}})
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


@pytest.mark.parametrize("trusted", [False, True], ids=["client", "trusted-proxy"])
async def test_the_upstream_never_gets_the_gateways_own_headers(
    start_upstream: StartUpstream, tmp_path: Path, trusted: bool
) -> None:
    seen: list[dict[str, str]] = []
    upstream = await start_upstream(recorder(seen))
    listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    config: dict[str, object] = {
        "listen": listen,
        "admin": admin,
        "routes": [
            {"name": "tools", "prefix": "/mcp", "type": "mcp", "upstream": upstream + "/mcp"},
            {"name": "api", "prefix": "/", "upstream": upstream},
        ],
    }
    if trusted:
        config["trusted_proxies"] = ["127.0.0.1/32"]
    path = write_config(tmp_path, config)
    call = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with (
        supervised(path, admin, tmp_path, workers=None),
        aiohttp.ClientSession() as session,
    ):
        async with session.get(f"http://{listen}/items", headers=SENT) as response:
            assert response.status == 200
        async with session.post(
            f"http://{listen}/mcp", json=call, headers={**SENT, **accept}
        ) as response:
            assert response.status == 200
    assert len(seen) == 2
    for headers in seen:
        assert "x-mendpoint-peer" not in headers and "x-mendpoint-relay" not in headers
        assert headers["x-mendpoint-whatever"] == "kept"
