"""Recovery resolution through the running gateway: scopes, policy, no leaks, budgets,
fail-open and the remote resolver, all over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.resolve.server import build_resolver_app
from gateway.resolve.service import RecoveryService
from gateway.serve.generation import STATE
from gateway.telemetry.metrics import REGISTRY
from tests.support.catalog import CATALOG
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream

KEYS = {"agent-a": "key-a-123", "agent-b": "key-b-456"}
CSV_ERROR = {"error": "Row at line 2 has 4 columns, expected 3"}
SKILLS = [
    {
        "name": "schema.infer_csv_schema",
        "version": "1.0.0",
        "recovers": ["format_inspection"],
        "repair": "inspect",
        "purpose": "Inspect the CSV structure before retrying.",
        "scopes": ["data:read"],
        "priority": 10,
    },
    {
        "name": "access.request_grant",
        "version": "2.1.0",
        "recovers": ["request_access"],
        "repair": "prepare",
        "purpose": "Ask for the grant the policy requires.",
    },
    {
        "name": "token.refresh",
        "version": "1.0.0",
        "recovers": ["escalate"],
        "repair": "reauth",
        "purpose": "Refresh the token.",
    },
]
RULES = [
    {
        "id": "csv-malformed",
        "match": {
            "status": [400],
            "json": {
                "path": "error",
                "regex": "Row at line (?P<line>\\d+) has (?P<got>\\d+) columns",
            },
        },
        "error": {
            "code": "CSV_MALFORMED",
            "category": "VALIDATION_ERROR",
            "message": "Row {line} has {got} columns",
            "fix_required": "Make row {line} match the header, then reissue",
            "recovery_intent": "format_inspection",
        },
    },
    {
        "id": "quota-policy",
        "match": {"status": [403], "body": "policy"},
        "error": {
            "code": "EXPORT_BLOCKED",
            "category": "POLICY_DENIED",
            "recovery_intent": "request_access",
        },
    },
    {
        "id": "forbidden",
        "match": {"status": [403], "body": "role"},
        "error": {
            "code": "ROLE_MISSING",
            "category": "PERMISSION_DENIED",
            "recovery_intent": "escalate",
        },
    },
    {
        "id": "json-broken",
        "match": {"status": [422]},
        "error": {
            "code": "JSON_MALFORMED",
            "category": "VALIDATION_ERROR",
            "fix_required": "Send valid JSON",
            "recovery_intent": "json_repair",
        },
    },
]


class Upstream:
    def __init__(self) -> None:
        self.hits = 0

    def app(self) -> web.Application:
        async def handler(request: web.Request) -> web.Response:
            self.hits += 1
            path = request.path
            if path == "/v1/csv/normalize":
                return web.json_response(CSV_ERROR, status=400)
            if path == "/v1/export":
                return web.json_response({"message": "blocked by policy P-7"}, status=403)
            if path == "/v1/admin":
                return web.json_response({"message": "role admin required"}, status=403)
            if path == "/v1/json":
                return web.json_response({"message": "bad json"}, status=422)
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        return app


def config(upstream: str, **extra: Any) -> dict[str, Any]:
    return {
        "routes": [
            {
                "name": "data",
                "prefix": "/",
                "upstream": upstream,
                "mode": "envelope",
                "operation": "data.csv_normalize",
            }
        ],
        "callers": {
            "header": "X-Api-Key",
            "keys": [
                {
                    "name": name,
                    "key": "sha256:" + hashlib.sha256(key.encode()).hexdigest(),
                    "scopes": ["data:read"] if name == "agent-a" else [],
                }
                for name, key in KEYS.items()
            ],
        },
        "rules": RULES,
        "skills": SKILLS,
        "policies": [{"allow": {"intent": "request_access", "skills": ["access.request_grant"]}}],
        **extra,
    }


async def call(
    gateway: RunningGateway, path: str, caller: str | None = "agent-a", **headers: str
) -> tuple[dict[str, Any], aiohttp.ClientResponse, bytes]:
    sent = dict(headers)
    if caller is not None:
        sent["X-Api-Key"] = KEYS[caller]
    async with gateway.session.post(gateway.url + path, headers=sent) as response:
        raw = await response.read()
        return json.loads(raw), response, raw


@pytest.fixture
async def upstream(start_upstream: StartUpstream) -> tuple[Upstream, str]:
    backend = Upstream()
    return backend, await start_upstream(backend.app())


async def test_caller_with_scope_gets_the_inspection_skill(
    start_gateway: StartGateway, upstream: tuple[Upstream, str]
) -> None:
    gateway = await start_gateway(config(upstream[1]))
    body, response, _ = await call(gateway, "/v1/csv/normalize", "agent-a")
    assert response.status == 400
    assert response.headers["X-Recovery-Available"] == "true"
    assert body["error"]["recovery_available"] is True
    assert body["failure"]["recovery_intent"] == {"intent": "format_inspection"}
    assert body["recovery"] == {
        "available": True,
        "options": [
            {
                "rank": 1,
                "skill_name": "schema.infer_csv_schema",
                "skill_version": "1.0.0",
                "purpose": "Inspect the CSV structure before retrying.",
                "then_retry": {"skill_name": "data.csv_normalize", "advisory": True},
            }
        ],
    }
    assert body["error"]["message"] == "Row 2 has 4 columns"


async def test_policy_denial_offers_only_what_a_policy_allows(
    start_gateway: StartGateway, upstream: tuple[Upstream, str]
) -> None:
    gateway = await start_gateway(config(upstream[1]))
    allowed, _, _ = await call(gateway, "/v1/export")
    denied, _, _ = await call(gateway, "/v1/admin")
    assert [o["skill_name"] for o in allowed["recovery"]["options"]] == ["access.request_grant"]
    assert denied["failure"]["category"] == "PERMISSION_DENIED"
    assert denied["recovery"] == {"available": False, "options": []}


async def hanging(request: web.Request) -> web.Response:
    await asyncio.sleep(60)
    return web.json_response({"options": []})


async def failing(request: web.Request) -> web.Response:
    return web.Response(status=500, text="resolver down")


async def test_no_leaks_the_empty_block_is_identical_for_every_reason(
    start_gateway: StartGateway, start_upstream: StartUpstream, upstream: tuple[Upstream, str]
) -> None:
    blocks: dict[str, bytes] = {}

    def block(body: dict[str, Any]) -> bytes:
        assert body["error"]["recovery_available"] is False
        return json.dumps(body["recovery"], separators=(",", ":")).encode()

    local = await start_gateway(config(upstream[1]))
    blocks["no-skill"] = block((await call(local, "/v1/json"))[0])
    blocks["out-of-scope"] = block((await call(local, "/v1/csv/normalize", "agent-b"))[0])
    blocks["unknown-caller"] = block((await call(local, "/v1/csv/normalize", None))[0])
    blocks["policy"] = block((await call(local, "/v1/admin"))[0])
    for name, handler in (("resolver-error", failing), ("budget", hanging)):
        resolver_app = web.Application()
        resolver_app.router.add_post("/v1/resolve", handler)
        url = await start_upstream(resolver_app)
        remote = await start_gateway(
            config(upstream[1], resolver={"url": url + "/v1/resolve", "budget_ms": 100})
        )
        blocks[name] = block((await call(remote, "/v1/csv/normalize"))[0])
    assert set(blocks.values()) == {b'{"available":false,"options":[]}'}
    assert len(blocks) == 6


async def test_a_resolver_that_hangs_costs_no_more_than_its_budget(
    start_gateway: StartGateway, start_upstream: StartUpstream, upstream: tuple[Upstream, str]
) -> None:
    resolver_app = web.Application()
    resolver_app.router.add_post("/v1/resolve", hanging)
    url = await start_upstream(resolver_app)
    gateway = await start_gateway(
        config(upstream[1], resolver={"url": url + "/v1/resolve", "budget_ms": 150})
    )
    timings = []
    for _ in range(3):
        started = time.monotonic()
        body, _, _ = await call(gateway, "/v1/csv/normalize")
        timings.append(time.monotonic() - started)
        assert body["failure"]["code"] == "CSV_MALFORMED"
    assert max(timings) < 0.15 + 0.35, timings


async def test_enrichment_over_budget_sends_the_original_bytes(
    start_gateway: StartGateway, start_upstream: StartUpstream, upstream: tuple[Upstream, str]
) -> None:
    resolver_app = web.Application()
    resolver_app.router.add_post("/v1/resolve", hanging)
    url = await start_upstream(resolver_app)
    gateway = await start_gateway(
        config(
            upstream[1],
            resolver={"url": url + "/v1/resolve", "budget_ms": 2000},
            enrich_budget_ms=100,
        )
    )
    started = time.monotonic()
    async with gateway.session.post(gateway.url + "/v1/csv/normalize") as response:
        raw = await response.read()
        headers = response.headers
    assert time.monotonic() - started < 0.1 + 0.4
    assert response.status == 400
    assert json.loads(raw) == CSV_ERROR
    assert "X-Error-Code" not in headers and "X-Recovery-Available" not in headers


async def test_an_exception_while_enriching_sends_the_original_bytes(
    start_gateway: StartGateway, upstream: tuple[Upstream, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: the classifier raises; the caller still gets the upstream's answer."""
    gateway = await start_gateway(config(upstream[1]))
    direct = await gateway.session.post(upstream[1] + "/v1/csv/normalize")
    expected = await direct.read()
    classifier = gateway.server.runner.app[STATE].current.exchange.classifier

    def explode(*args: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(classifier, "classify", explode)
    async with gateway.session.post(gateway.url + "/v1/csv/normalize") as response:
        assert response.status == 400
        assert await response.read() == expected
        assert "X-Error-Code" not in response.headers
        assert response.headers["Content-Type"] == direct.headers["Content-Type"]


async def test_remote_resolver_gets_no_credentials_and_upstream_count_is_unchanged(
    start_gateway: StartGateway, start_upstream: StartUpstream, upstream: tuple[Upstream, str]
) -> None:
    seen: list[tuple[dict[str, str], bytes]] = []
    service = RecoveryService(CATALOG, 3)
    resolver_app = build_resolver_app(service)

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append((dict(request.headers), await request.read()))
        response: web.StreamResponse = await handler(request)
        return response

    resolver_app.middlewares.append(record)
    url = await start_upstream(resolver_app)
    backend, base = upstream
    with_remote = await start_gateway(config(base, resolver={"url": url + "/v1/resolve"}))
    without = await start_gateway(config(base))
    secrets = {"Authorization": "Bearer s3cret", "Cookie": "session=s3cret"}
    for gateway in (with_remote, without):
        before = backend.hits
        for _ in range(3):
            body, _, _ = await call(gateway, "/v1/csv/normalize", **secrets)
        assert backend.hits - before == 3
    assert body["recovery"]["available"] is True
    options = (await call(with_remote, "/v1/csv/normalize"))[0]["recovery"]["options"]
    assert [o["skill_name"] for o in options] == ["csv.sniff", "schema.infer_csv_schema"]
    assert options[0]["then_retry"] == {"skill_name": "data.csv_normalize", "advisory": True}
    assert len(seen) == 1  # one resolution, then the cache
    headers, raw = seen[0]
    lowered = {k.lower() for k in headers}
    assert not lowered & {"authorization", "cookie", "x-api-key"}
    for secret in ("s3cret", KEYS["agent-a"], hashlib.sha256(KEYS["agent-a"].encode()).hexdigest()):
        assert secret.encode() not in raw


async def test_catalog_gap_is_counted(
    start_gateway: StartGateway, upstream: tuple[Upstream, str]
) -> None:
    def gaps() -> float:
        value = REGISTRY.get_sample_value(
            "mendpoint_resolver_catalog_gap_total", {"intent": "json_repair"}
        )
        return value or 0.0

    gateway = await start_gateway(config(upstream[1]))
    before = gaps()
    await call(gateway, "/v1/json")
    await call(gateway, "/v1/csv/normalize")  # declared intent: not a gap
    await call(gateway, "/v1/json")
    assert gaps() == before + 2


async def test_keys_and_hashes_never_reach_logs_or_responses(
    start_gateway: StartGateway, upstream: tuple[Upstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    gateway = await start_gateway(config(upstream[1]))
    _, response, raw = await call(gateway, "/v1/csv/normalize", "agent-a")
    _, _, raw_b = await call(gateway, "/v1/csv/normalize", "agent-b")
    key = KEYS["agent-a"]
    digest = hashlib.sha256(key.encode()).hexdigest()
    exposed = caplog.text + raw.decode() + raw_b.decode() + str(dict(response.headers))
    assert caplog.text  # the failure path did log something to inspect
    assert key not in exposed and digest not in exposed
    assert KEYS["agent-b"] not in exposed
