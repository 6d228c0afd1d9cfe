"""MCP routes run the same enrichment step and upstream call as HTTP routes.

An upgraded tool error is counted like an HTTP failure (`mendpoint_failures_total`), on a
route to an upstream URL and on a bridge route; `limits.response_timeout_s` cuts a slow MCP
upstream exactly as it cuts a slow HTTP one; and a fault injected into any step of the
enrichment (the HTTP suite's own mechanism, `tests.support.failopen`) sends the server's
bytes unchanged and counts the fallback.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.telemetry.metrics import REGISTRY
from tests.support.failopen import STEPS, ask, assert_original, inject_fault
from tests.support.gateway import RunningGateway, StartGateway, StartRaw, StartUpstream
from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS

ENOENT = "ENOENT: no such file or directory, open '/tmp/fsroot/missing.txt'"
TOOL_ERROR = {"content": [{"type": "text", "text": ENOENT}], "isError": True}
CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "read_text_file", "arguments": {"path": "missing.txt"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
FAILURE_LABELS = {
    "category": "NOT_FOUND",
    "code": "FILE_NOT_FOUND",
    "rule": "mcp-enoent",
    "mode": "additive",
}
BAD_SERVER = [sys.executable, str(MCP_SERVERS / "bad_server.py")]


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def tool_error_app(result: dict[str, Any] = TOOL_ERROR) -> web.Application:
    """An MCP server over HTTP whose every `tools/call` fails with ENOENT (as JSON)."""

    async def mcp(request: web.Request) -> web.Response:
        message = await request.json()
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})

    app = web.Application()
    app.router.add_post("/mcp", mcp)
    return app


def mcp_route(upstream: str, **route: Any) -> dict[str, Any]:
    return {
        "routes": [{"name": "tools", "prefix": "/", "type": "mcp", "upstream": upstream, **route}]
    }


async def call_through_bridge(gateway: RunningGateway) -> dict[str, Any]:
    """`initialize`, then one `tools/call` the server answers with the ENOENT tool error."""
    url = gateway.url + "/mcp"
    async with gateway.session.post(url, json=INIT, headers=HEADERS) as response:
        assert response.status == 200
        session = response.headers["Mcp-Session-Id"]
    params = {**CALL["params"], "_reply": {"result": TOOL_ERROR}}  # type: ignore[dict-item]
    headers = {**HEADERS, "Accept": "application/json", "Mcp-Session-Id": session}
    async with gateway.session.post(url, json={**CALL, "params": params}, headers=headers) as r:
        assert r.status == 200
        answer: dict[str, Any] = json.loads(await r.read())
    return answer


async def call_through_route(gateway: RunningGateway) -> dict[str, Any]:
    async with gateway.session.post(gateway.url + "/mcp", json=CALL, headers=HEADERS) as r:
        assert r.status == 200
        answer: dict[str, Any] = json.loads(await r.read())
    return answer


@pytest.mark.parametrize("transport", ["upstream", "bridge"])
async def test_an_upgraded_tool_error_is_counted(
    transport: str, start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    if transport == "upstream":
        gateway = await start_gateway(mcp_route(await start_upstream(tool_error_app())))
    else:
        gateway = await start_gateway(
            {"routes": [{"name": "tools", "type": "mcp", "command": BAD_SERVER}]}
        )
    before = metric("mendpoint_failures_total", route="tools", **FAILURE_LABELS)
    unmatched = metric("mendpoint_unmatched_failures_total", route="tools", status_class="mcp")
    envelopes = metric("mendpoint_envelopes_total", route="tools", mode="additive")
    call = call_through_route if transport == "upstream" else call_through_bridge
    answer = await call(gateway)
    failure = json.loads(answer["result"]["content"][-1]["text"])["mendpoint_failure"]
    assert failure["error"]["code"] == "FILE_NOT_FOUND"
    assert metric("mendpoint_failures_total", route="tools", **FAILURE_LABELS) == before + 1
    assert metric("mendpoint_envelopes_total", route="tools", mode="additive") == envelopes + 1
    # A shipped default classified it: counted as unmatched, and its signature is kept for gaps.
    assert (
        metric("mendpoint_unmatched_failures_total", route="tools", status_class="mcp")
        == unmatched + 1
    )
    assert [g.signature.status for g in gateway.server.signatures.top()] == ["mcp"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("\ufeff" + ENOENT, ENOENT),  # the text's byte order mark is not part of its message
        ("ENOENT: no such file \ud800 x", "ENOENT: no such file \ufffd\ufffd\ufffd x"),
    ],
    ids=["byte-order-mark", "lone-surrogate"],
)
async def test_a_tool_error_text_is_read_as_its_utf8_bytes(
    text: str, message: str, start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    """The rules read a tool error's text as the UTF-8 it is sent as: a leading byte order mark
    is dropped, and a lone surrogate (a legal JSON escape with no UTF-8 form) reads as U+FFFD
    instead of failing the call (it raised out of the rewrite before)."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
    gateway = await start_gateway(mcp_route(await start_upstream(tool_error_app(result))))
    answer = await call_through_route(gateway)
    assert answer["result"]["content"][0] == result["content"][0]
    failure = json.loads(answer["result"]["content"][-1]["text"])["mendpoint_failure"]
    assert failure["error"]["code"] == "FILE_NOT_FOUND"
    assert failure["error"]["message"] == message


async def test_original_mode_counts_and_changes_nothing(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(tool_error_app())
    gateway = await start_gateway(mcp_route(upstream, mode="original"))
    labels = {**FAILURE_LABELS, "mode": "original"}
    before = metric("mendpoint_failures_total", route="tools", **labels)
    direct = await ask(gateway.session, upstream + "/mcp", json=CALL, headers=HEADERS)
    got = await ask(gateway.session, gateway.url + "/mcp", json=CALL, headers=HEADERS)
    assert_original(got, direct)
    assert metric("mendpoint_failures_total", route="tools", **labels) == before + 1


async def test_a_slow_mcp_upstream_meets_the_response_deadline_like_an_http_one(
    start_gateway: StartGateway, start_raw: StartRaw
) -> None:
    """`response_timeout_s: 1`, an upstream that answers after 3 s: both route types give up
    at 1 s with the same synthesised 504 (the MCP route used to wait and answer 200)."""

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        try:
            await asyncio.wait_for(reader.read(), 3)  # the gateway may hang up first
            return
        except TimeoutError:
            pass
        body = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": []}}).encode()
        reply = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
        writer.write(reply.encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()

    upstream = await start_raw(slow)
    routes = [
        {"name": "tools", "prefix": "/mcp", "type": "mcp", "upstream": upstream.url},
        {"name": "api", "prefix": "/", "upstream": upstream.url},
    ]
    gateway = await start_gateway({"routes": routes, "limits": {"response_timeout_s": 1}})
    answers = {}
    for path in ("/mcp", "/api"):
        got = await ask(gateway.session, gateway.url + path, json=CALL, headers=HEADERS)
        assert got.status == 504, (path, got.body)
        assert 0.9 < got.seconds < 2.5, (path, got.seconds)
        answers[path] = got
    assert answers["/mcp"].headers["X-Error-Code"] == answers["/api"].headers["X-Error-Code"]
    assert json.loads(answers["/mcp"].body)["meta"]["transport"] == "read_timeout"


# The shared steps, with the MCP renderer's own in place of the HTTP body renderer.
MCP_STEPS = {
    **{name: step for name, step in STEPS.items() if name != "render"},
    "payload": ("gateway.mcp.upgrade", "error_object"),
    "rewrite": ("gateway.mcp.upgrade", "upgraded_tool_result"),
}


@pytest.mark.parametrize(("owner", "attribute"), list(MCP_STEPS.values()), ids=list(MCP_STEPS))
async def test_an_enrichment_step_that_raises_sends_the_servers_bytes(
    owner: str,
    attribute: str,
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream = await start_upstream(tool_error_app())
    gateway = await start_gateway(mcp_route(upstream))
    inject_fault(monkeypatch, gateway, owner, attribute)
    fell_back = metric("mendpoint_fail_open_total", route="tools", reason="exception")
    direct = await ask(gateway.session, upstream + "/mcp", json=CALL, headers=HEADERS)
    got = await ask(gateway.session, gateway.url + "/mcp", json=CALL, headers=HEADERS)
    assert_original(got, direct)
    assert metric("mendpoint_fail_open_total", route="tools", reason="exception") == fell_back + 1


async def test_enrichment_over_budget_sends_the_servers_bytes(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    """A remote resolver that hangs past `enrich_budget_ms`: the server's bytes, in time."""

    async def hangs(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.json_response({"options": []})

    resolver = web.Application()
    resolver.router.add_post("/v1/resolve", hangs)
    resolver_url = await start_upstream(resolver)
    upstream = await start_upstream(tool_error_app())
    rule = {
        "id": "missing-file",
        "match": {"mcp": {"tool": "read_*"}, "body": "ENOENT"},
        "error": {
            "code": "FILE_MISSING",
            "category": "VALIDATION_ERROR",
            "fix_required": "Use a path that exists",
            "recovery_intent": "path_discovery",
        },
    }
    skill = {
        "name": "fs.list",
        "version": "1.0.0",
        "recovers": ["path_discovery"],
        "repair": "inspect",
        "purpose": "List the directory first.",
    }
    gateway = await start_gateway(
        {
            **mcp_route(upstream),
            "rules": [rule],
            "skills": [skill],
            "resolver": {"url": resolver_url + "/v1/resolve", "budget_ms": 5000},
            "enrich_budget_ms": 150,
        }
    )
    fell_back = metric("mendpoint_fail_open_total", route="tools", reason="enrich_budget")
    direct = await ask(gateway.session, upstream + "/mcp", json=CALL, headers=HEADERS)
    started = time.monotonic()
    got = await ask(gateway.session, gateway.url + "/mcp", json=CALL, headers=HEADERS)
    assert time.monotonic() - started < 0.15 + 0.5
    assert_original(got, direct)
    assert metric("mendpoint_fail_open_total", route="tools", reason="enrich_budget") == (
        fell_back + 1
    )


async def test_the_upstream_call_is_recorded_for_mcp_routes(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    """The shared upstream call observes the upstream's latency for MCP routes too."""
    gateway = await start_gateway(mcp_route(await start_upstream(tool_error_app())))
    count = "mendpoint_upstream_latency_seconds_count"
    before = metric(count, route="tools")
    async with (
        aiohttp.ClientSession() as session,
        session.post(gateway.url + "/mcp", json=CALL, headers=HEADERS) as response,
    ):
        assert response.status == 200
    assert metric(count, route="tools") == before + 1
