"""CORS on MCP routes: what a browser client on an allowed origin needs (docs/mcp.md).

A preflight is sent exactly as a browser sends it; the SDK client then runs a whole session
with an `Origin` header, through a route to an SDK server over Streamable HTTP and through the
bridge. Directly, the SDK server answers the same preflight 405.
"""

from __future__ import annotations

import sys
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.gateway import RunningGateway, StartGateway, route_config
from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS

PAGE = "http://localhost:6274"
SDK_STDIO = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
PREFLIGHT = {
    "Origin": PAGE,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type,mcp-protocol-version,mcp-session-id",
}


def config(kind: str, upstream: str) -> dict[str, Any]:
    if kind == "bridge":
        route = {"name": "tools", "type": "mcp", "command": SDK_STDIO}
        return {"admin": None, "routes": [{**route, "allowed_origins": [PAGE]}]}
    return route_config(upstream, type="mcp", allowed_origins=[PAGE])


async def gateway_for(kind: str, start_gateway: StartGateway, sdk: str) -> RunningGateway:
    return await start_gateway(config(kind, sdk))


@pytest.mark.parametrize("kind", ["route", "bridge"])
async def test_preflight_from_an_allowed_origin_is_answered(
    start_gateway: StartGateway, sdk_server: str, kind: str
) -> None:
    gateway = await gateway_for(kind, start_gateway, sdk_server)
    async with gateway.session.options(sdk_server + "/mcp", headers=PREFLIGHT) as direct:
        assert direct.status == 405  # what a browser got before: no session possible
    async with await gateway.request("OPTIONS", "/mcp", headers=PREFLIGHT) as answer:
        assert answer.status == 204
    assert answer.headers["Access-Control-Allow-Origin"] == PAGE
    assert "POST" in answer.headers["Access-Control-Allow-Methods"]
    allowed = {h.strip().lower() for h in answer.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "mcp-protocol-version", "mcp-session-id", "last-event-id"} <= allowed
    assert "Origin" in answer.headers["Vary"]


@pytest.mark.parametrize("kind", ["route", "bridge"])
async def test_preflight_from_another_origin_is_refused(
    start_gateway: StartGateway, sdk_server: str, kind: str
) -> None:
    gateway = await gateway_for(kind, start_gateway, sdk_server)
    async with await gateway.request(
        "OPTIONS", "/mcp", headers={**PREFLIGHT, "Origin": "http://evil.example"}
    ) as answer:
        assert answer.status == 403
    assert "Access-Control-Allow-Origin" not in answer.headers


@pytest.mark.parametrize("kind", ["route", "bridge"])
async def test_answers_let_the_page_read_the_session_headers(
    start_gateway: StartGateway, sdk_server: str, kind: str
) -> None:
    gateway = await gateway_for(kind, start_gateway, sdk_server)
    headers = {"Origin": PAGE, "Accept": "application/json, text/event-stream"}
    answer = await gateway.request("POST", "/mcp", json=INIT, headers=headers)
    assert answer.status == 200
    await answer.read()
    assert answer.headers["Access-Control-Allow-Origin"] == PAGE
    exposed = {
        h.strip().lower() for h in answer.headers["Access-Control-Expose-Headers"].split(",")
    }
    assert {"mcp-session-id", "mcp-protocol-version", "last-event-id"} <= exposed
    assert "www-authenticate" in exposed
    assert answer.headers.get("Mcp-Session-Id")
    # A request with no Origin (not a browser) gets no CORS headers.
    plain = await gateway.request("POST", "/mcp", json=INIT, headers={"Accept": headers["Accept"]})
    await plain.read()
    assert "Access-Control-Allow-Origin" not in plain.headers


@pytest.mark.parametrize("kind", ["route", "bridge"])
async def test_sdk_client_with_an_origin_runs_a_session(
    start_gateway: StartGateway, sdk_server: str, kind: str
) -> None:
    gateway = await gateway_for(kind, start_gateway, sdk_server)
    async with (
        httpx2.AsyncClient(headers={"Origin": PAGE}) as http,
        Client(streamable_http_client(gateway.url + "/mcp", http_client=http)) as client,
    ):
        ok = await client.call_tool("add", {"a": 1, "b": 2})
        assert ok.structured_content == {"result": 3}
        failed = await client.call_tool("read_note", {"name": "nope"})
        assert failed.is_error is True
        assert failed.meta is not None and "mendpoint/failure" in failed.meta
