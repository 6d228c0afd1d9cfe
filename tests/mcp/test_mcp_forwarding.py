"""`type: mcp` routes treat forwarding headers as HTTP routes do (docs/security.md).

From a peer in `trusted_proxies` (the client binds 127.0.0.2) the proxy's `X-Forwarded-Proto`
and `X-Real-IP` reach the MCP server; from 127.0.0.1 they are replaced and dropped.
"""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from multidict import CIMultiDictProxy

from tests.support.gateway import StartGateway, StartUpstream, exchange_raw

PING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()


@pytest.mark.parametrize(
    ("source", "proto", "real_ip"),
    [("127.0.0.2", "https", "203.0.113.7"), ("127.0.0.1", "http", None)],
    ids=["trusted", "untrusted"],
)
async def test_mcp_route_forwarding_headers_follow_trusted_proxies(
    source: str,
    proto: str,
    real_ip: str | None,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
) -> None:
    seen: list[CIMultiDictProxy[str]] = []

    async def server(request: web.Request) -> web.Response:
        seen.append(request.headers)
        return web.json_response({"jsonrpc": "2.0", "id": 1, "result": {}})

    app = web.Application()
    app.router.add_post("/mcp", server)
    upstream = await start_upstream(app)
    gateway = await start_gateway(
        {
            "routes": [{"name": "tools", "type": "mcp", "upstream": upstream}],
            "trusted_proxies": ["127.0.0.2"],
        }
    )
    head = (
        "POST /mcp HTTP/1.1\r\nHost: tools.example\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nX-Forwarded-Proto: https\r\n"
        f"X-Real-IP: 203.0.113.7\r\nContent-Length: {len(PING)}\r\nConnection: close\r\n\r\n"
    )
    response = await exchange_raw(gateway.url, head.encode() + PING, source=source)
    assert response.status == 200
    (headers,) = seen
    assert headers.getall("X-Forwarded-Proto") == [proto]
    assert headers.getall("X-Real-IP", []) == ([real_ip] if real_ip else [])
    assert headers.getall("X-Forwarded-For") == [source]
