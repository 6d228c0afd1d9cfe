"""An OAuth-protected MCP server and its authorization server, written with the SDK's auth helpers.

`python oauth_server.py AS_PORT RS_PORT` serves, on 127.0.0.1:

- AS_PORT: an authorization server (`create_auth_routes`: metadata, dynamic registration,
  authorize, token) whose provider approves every request at once, as a user clicking
  "Allow" would;
- RS_PORT: an MCP server (`MCPServer`, Streamable HTTP at /mcp) that needs a bearer token from
  it, and that builds its resource URL from the request's `Host`, as many servers behind
  proxies do: its protected-resource metadata at
  `/.well-known/oauth-protected-resource/mcp` and the `resource_metadata` of its 401s name
  `http://{Host}/mcp`.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from typing import Any

import uvicorn
from mcp.server import MCPServer
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken, ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

WELL_KNOWN = "/.well-known/oauth-protected-resource/mcp"


class ApprovingProvider:
    """In-memory clients, codes and tokens; every authorization is granted."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens: dict[str, AccessToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        token = secrets.token_urlsafe(24)
        self.tokens[token] = AccessToken(
            token=token,
            client_id=authorization_code.client_id,
            scopes=authorization_code.scopes,
            expires_at=int(time.time()) + 3600,
            resource=authorization_code.resource,
        )
        return OAuthToken(access_token=token, token_type="Bearer", expires_in=3600)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        raise NotImplementedError

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.tokens.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.tokens.pop(token.token, None)

    async def exchange_identity_assertion(self, client: Any, params: Any) -> OAuthToken:
        raise NotImplementedError


class HostBuiltResource:
    """The resource server: metadata and challenges built from `Host`, the rest needs a token."""

    def __init__(self, app: ASGIApp, provider: ApprovingProvider, issuer: str) -> None:
        self.app = app
        self.provider = provider
        self.issuer = issuer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        host = request.headers.get("host", "")
        if request.url.path == WELL_KNOWN:
            metadata = ProtectedResourceMetadata(
                resource=AnyHttpUrl(f"http://{host}/mcp"),
                authorization_servers=[AnyHttpUrl(self.issuer)],
            )
            document = metadata.model_dump(mode="json", exclude_none=True)
            await JSONResponse(document)(scope, receive, send)
            return
        auth = request.headers.get("authorization", "")
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        if await self.provider.load_access_token(token) is None:
            challenge = f'Bearer resource_metadata="http://{host}{WELL_KNOWN}"'
            await Response(status_code=401, headers={"WWW-Authenticate": challenge})(
                scope, receive, send
            )
            return
        await self.app(scope, receive, send)


server = MCPServer("mendpoint-oauth-test-server")


@server.tool()
def whoami() -> str:
    """Answer only to an authorized client."""
    return "authorized"


async def main(as_port: int, rs_port: int) -> None:
    issuer = f"http://127.0.0.1:{as_port}"
    provider = ApprovingProvider()
    routes = create_auth_routes(
        provider,
        AnyHttpUrl(issuer),
        client_registration_options=ClientRegistrationOptions(enabled=True),
    )
    authorization = Starlette(routes=routes)
    resource = HostBuiltResource(server.streamable_http_app(), provider, issuer)
    servers = [
        uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        for app, port in ((authorization, as_port), (resource, rs_port))
    ]
    await asyncio.gather(*(s.serve() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
