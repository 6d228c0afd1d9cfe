"""OAuth behind the gateway: the SDK client's whole flow (401, protected-resource metadata,
authorization-server metadata, dynamic registration, authorize, token, retry) through a
`type: mcp` route, against an authorization server and a resource server written with the
SDK's auth helpers (tests/mcp_servers/oauth_server.py) that builds its resource URL from
`Host`. Without `public_url` or `preserve_host` the client refuses the server, as it would
directly behind any Host-rewriting proxy (docs/mcp.md)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.auth.exceptions import OAuthFlowError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

from tests.support.gateway import StartGateway, route_config
from tests.support.paths import MCP_SERVERS
from tests.support.ports import free_port
from tests.support.upstreams import wait_listening

CALLBACK = "http://127.0.0.1:1/callback"  # never visited: the redirect is read, not followed


@dataclass
class OAuthServers:
    authorization: str
    resource: str


@pytest.fixture
async def oauth_servers() -> AsyncIterator[OAuthServers]:
    as_port, rs_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(MCP_SERVERS / "oauth_server.py"),
        str(as_port),
        str(rs_port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_listening(as_port, process)
        await wait_listening(rs_port, process)
        yield OAuthServers(f"http://127.0.0.1:{as_port}", f"http://127.0.0.1:{rs_port}")
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The user's browser: opens the authorization URL and reads where it is sent back."""

    def __init__(self) -> None:
        self.redirected_to: str | None = None

    async def open(self, url: str) -> None:
        async with httpx2.AsyncClient() as http:
            answer = await http.get(url, follow_redirects=False)
        assert answer.status_code in (302, 303, 307), answer.text
        self.redirected_to = answer.headers["location"]

    async def callback(self) -> AuthorizationCodeResult:
        assert self.redirected_to is not None
        query = parse_qs(urlsplit(self.redirected_to).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0])


async def call_whoami(url: str) -> str:
    """The SDK client's OAuth flow from scratch, then one tool call."""
    browser = Browser()
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="mendpoint-test",
            redirect_uris=[AnyUrl(CALLBACK)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=MemoryStorage(),
        redirect_handler=browser.open,
        callback_handler=browser.callback,
    )
    async with (
        httpx2.AsyncClient(auth=provider) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("whoami", {})
        text: Any = result.content[0]
        return str(text.text)


async def test_directly_the_flow_completes(oauth_servers: OAuthServers) -> None:
    assert await call_whoami(oauth_servers.resource + "/mcp") == "authorized"


@pytest.mark.parametrize(
    "route",
    [{"public_url": "GATEWAY"}, {"preserve_host": True}],
    ids=["public_url", "preserve_host"],
)
async def test_the_flow_completes_through_the_gateway(
    start_gateway: StartGateway, oauth_servers: OAuthServers, route: dict[str, Any]
) -> None:
    port = free_port()
    gateway_url = f"http://127.0.0.1:{port}"
    settings = {k: (gateway_url if v == "GATEWAY" else v) for k, v in route.items()}
    config = route_config(oauth_servers.resource, type="mcp", **settings)
    gateway = await start_gateway(config, listen=f"127.0.0.1:{port}")
    assert gateway.url == gateway_url
    assert await call_whoami(gateway_url + "/mcp") == "authorized"
    # The metadata names the gateway; the authorization server stays as the server wrote it.
    metadata = await gateway.request("GET", "/.well-known/oauth-protected-resource/mcp")
    document = await metadata.json()
    assert document["resource"] == gateway_url + "/mcp"
    assert document["authorization_servers"] == [oauth_servers.authorization + "/"]


async def test_without_either_the_client_refuses_the_server(
    start_gateway: StartGateway, oauth_servers: OAuthServers
) -> None:
    gateway = await start_gateway(route_config(oauth_servers.resource, type="mcp"))
    with pytest.raises(ExceptionGroup) as raised:
        await call_whoami(gateway.url + "/mcp")
    assert raised.group_contains(OAuthFlowError, match="does not match expected", depth=None)
