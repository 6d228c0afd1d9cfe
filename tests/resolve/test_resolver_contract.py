"""Nothing a caller sends reaches the resolver beyond the contract's fields (docs/security.md).

A hostile caller stuffs headers, body and query with claims about scopes, operations and
intents, and with credentials. A real aiohttp resolver (the shipped endpoint, with a token)
records every request it receives, byte for byte: the body must be exactly the failure, the
scopes the gateway determined and the route/operation, the headers only the gateway's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gateway.resolve.auth import TokenFile
from gateway.resolve.server import build_resolver_app
from gateway.resolve.service import RecoveryService
from tests.support.catalog import CATALOG
from tests.support.gateway import StartGateway, StartUpstream
from tests.support.recovery import CSV_RULE, csv_failing_upstream
from tests.support.secrets import write_secret

TOKEN = "9c0ffee5ecre7t0k3n4gatewayonly00"
HOSTILE_HEADERS = {
    "X-Caller": "root",
    "X-Scopes": "admin:secret data:write",
    "X-Api-Key": "not-a-known-key",
    "Authorization": "Bearer stolen-resolver-token-000000",
    "Cookie": "session=hijack",
    "X-Forwarded-For": "10.6.6.6",
    "Forwarded": "for=10.6.6.6",
    "X-Request-Id": "inject-request-id",
    "X-Error-Format": "envelope",
    "X-Resolver-Intent": "exfiltrate",
    "Content-Type": "application/json",
}
HOSTILE_BODY = {
    "failure": {"category": "POLICY_DENIED", "code": "EVIL", "intent": "request_access"},
    "caller": {"scopes": ["admin:secret"]},
    "context": {"operation": "evil.op", "route": "admin", "tool": "rm"},
}
HOSTILE_QUERY = "?scopes=admin:secret&operation=evil.op&intent=request_access&token=x"
GATEWAY_HEADERS = {
    "host",
    "authorization",
    "content-type",
    "content-length",
    "user-agent",
    "accept",
    "accept-encoding",
}


def config(upstream: str, resolver: str, token_file: Path) -> dict[str, Any]:
    return {
        "routes": [{"name": "data", "upstream": upstream, "mode": "envelope"}],
        "trusted_proxies": ["127.0.0.2"],
        "callers": {"source": "trusted_header", "header": "X-Caller", "scopes_header": "X-Scopes"},
        "resolver": {"url": resolver + "/v1/resolve", "token_file": str(token_file)},
        "rules": [CSV_RULE],
    }


async def test_a_hostile_caller_cannot_change_what_the_resolver_receives(
    tmp_path: Path, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    received: list[tuple[list[tuple[str, str]], str, bytes]] = []
    token_file = tmp_path / "token"
    write_secret(token_file, TOKEN)
    resolver_app = build_resolver_app(RecoveryService(CATALOG, 3), TokenFile(str(token_file)))

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        received.append((list(request.headers.items()), request.path_qs, await request.read()))
        response: web.StreamResponse = await handler(request)
        return response

    resolver_app.middlewares.append(record)
    resolver = await start_upstream(resolver_app)
    upstream = await start_upstream(csv_failing_upstream())
    gateway = await start_gateway(config(upstream, resolver, token_file))
    async with (
        aiohttp.ClientSession() as session,  # from 127.0.0.1: not a trusted proxy
        session.post(
            gateway.url + "/v1/csv" + HOSTILE_QUERY,
            data=json.dumps(HOSTILE_BODY),
            headers=HOSTILE_HEADERS,
        ) as response,
    ):
        body = json.loads(await response.read())
    assert response.status == 400
    assert [o["skill_name"] for o in body["recovery"]["options"]] == ["csv.sniff"]

    assert len(received) == 1
    headers, target, raw = received[0]
    assert target == "/v1/resolve"
    assert json.loads(raw) == {
        "failure": {
            "category": "VALIDATION_ERROR",
            "code": "CSV_MALFORMED",
            "intent": "format_inspection",
        },
        "caller": {"scopes": []},  # anonymous: the spoofed identity came from an untrusted peer
        "context": {"route": "data", "operation": "POST /v1/csv", "tool": None},
    }
    assert {name.lower() for name, _ in headers} <= GATEWAY_HEADERS
    assert dict(headers)["Authorization"] == f"Bearer {TOKEN}"
    everything = repr(headers).encode() + raw
    for value in (*HOSTILE_HEADERS.values(), "admin:secret", "evil.op", "EVIL", "exfiltrate"):
        if value not in ("application/json",):
            assert value.encode() not in everything, value

    # The same request through the trusted auth layer: only the scopes it vouches for change.
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(
            gateway.url + "/v1/csv" + HOSTILE_QUERY,
            data=json.dumps(HOSTILE_BODY),
            headers=HOSTILE_HEADERS,
        ) as response,
    ):
        assert response.status == 400
    assert len(received) == 2
    trusted_headers, _, trusted_raw = received[1]
    assert json.loads(trusted_raw)["caller"] == {"scopes": ["admin:secret", "data:write"]}
    assert json.loads(trusted_raw)["context"] == json.loads(raw)["context"]
    assert {name.lower() for name, _ in trusted_headers} <= GATEWAY_HEADERS
