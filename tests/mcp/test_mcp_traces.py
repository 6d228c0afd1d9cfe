"""Traces of MCP exchanges in the MCP semantic conventions (docs/operations.md#traces).

The official MCP client calls a tool of the SDK-written server through the gateway, with its
span in `params._meta.traceparent` and another in the HTTP `traceparent`: the exchange's span
is the `_meta` span's child and links the HTTP one (the MCP conventions' rule), and a tool
result with `isError` is a failure on it (`error.type = tool_error`), as a JSON-RPC error is
(its code). A real OTLP/HTTP receiver decodes what the gateway exports.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import aiohttp
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta

from gateway.telemetry.tracing import TRACING
from tests.support.gateway import StartGateway
from tests.support.otlp import (
    CLIENT,
    SERVER,
    STATUS_ERROR,
    OtlpReceiver,
    Received,
    caller_context,
    flushed,
)
from tests.support.paths import MCP_SERVERS

RULE = {
    "id": "note-missing",
    "match": {"mcp": {}, "body": "no such file"},
    "error": {
        "code": "NOTE_MISSING",
        "category": "NOT_FOUND",
        "fix_required": "Read a note that exists ('hello'), then call again",
        "recovery_intent": "note_listing",
    },
}
SKILL = {
    "name": "notes.list",
    "version": "1.0.0",
    "recovers": ["note_listing"],
    "repair": "inspect",
    "purpose": "List the notes that exist.",
}


@pytest.fixture(autouse=True)
def quick_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    running = await OtlpReceiver().start()
    yield running
    await asyncio.to_thread(TRACING.stop)
    await running.close()


def named(spans: list[Received], name: str) -> Received:
    (span,) = [s for s in spans if s.kind == SERVER and s.name == name]
    return span


# JSON answers: an SSE answer's client may hang up after the last event, before the
# exchange ends, and the span then says `client_closed` instead of the status.
@pytest.mark.parametrize("sdk_server", [["json"]], indirect=True)
async def test_a_failing_tool_call_carries_the_mcp_conventions_under_its_meta_parent(
    start_gateway: StartGateway, sdk_server: str, receiver: OtlpReceiver
) -> None:
    gateway = await start_gateway(
        {
            "routes": [{"name": "tools", "prefix": "/", "type": "mcp", "upstream": sdk_server}],
            "rules": [RULE],
            "skills": [SKILL],
            "telemetry": {"otlp_endpoint": receiver.url},
        }
    )
    http_trace, http_span, http_traceparent = caller_context()
    meta_trace, meta_span, meta_traceparent = caller_context()
    sessions: list[str] = []

    async def remember(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            sessions.append(response.headers["mcp-session-id"])

    url = gateway.url + "/mcp"
    async with (
        httpx2.AsyncClient(
            headers={"traceparent": http_traceparent},
            event_hooks={"response": [remember]},
            timeout=httpx2.Timeout(30, read=300),
        ) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        result = await client.call_tool(
            "read_note",
            {"name": "missing"},
            meta=cast(RequestParamsMeta, {"traceparent": meta_traceparent}),
        )
        assert result.is_error
        failure = json.loads(result.content[-1].text)["mendpoint_failure"]  # type: ignore[union-attr]
        assert failure["error"]["code"] == "NOTE_MISSING"
        # A method the server does not have: a JSON-RPC error, on the same session.
        headers = {
            "Mcp-Session-Id": sessions[-1],
            "MCP-Protocol-Version": "2025-11-25",
            "Accept": "application/json, text/event-stream",
            "traceparent": http_traceparent,
        }
        unknown = {"jsonrpc": "2.0", "id": "q-1", "method": "no/such/method", "params": {}}
        async with (
            aiohttp.ClientSession() as raw,
            raw.post(url, json=unknown, headers=headers) as response,
        ):
            assert response.status == 200
            assert b"-32601" in await response.read()
    spans = await flushed(receiver, 8)
    call = named(spans, "tools/call read_note")
    assert call.trace_id == meta_trace and call.parent_span_id == meta_span
    assert call.links == [(http_trace, http_span)]
    assert call.status_code == STATUS_ERROR
    attributes = call.attributes
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["mcp.session.id"] == sessions[-1]
    assert attributes["mcp.protocol.version"] == "2025-11-25"
    assert attributes["jsonrpc.request.id"].isdigit()
    assert attributes["gen_ai.tool.name"] == "read_note"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["error.type"] == "tool_error"
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "tools"
    assert attributes["http.response.status_code"] == 200
    assert attributes["url.path"] == "/mcp"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["mendpoint.rule.id"] == "note-missing"
    assert attributes["mendpoint.failure.code"] == "NOTE_MISSING"
    assert attributes["mendpoint.failure.category"] == "NOT_FOUND"
    assert attributes["mendpoint.failure.retryable"] is False
    assert attributes["mendpoint.mode"] == "additive"
    assert attributes["mendpoint.resolution.outcome"] == "options"
    assert [name for name, _ in call.events] == ["mendpoint.failure"]
    # Its upstream attempt is its child, with the HTTP conventions of a client.
    (attempt,) = [s for s in spans if s.kind == CLIENT and s.parent_span_id == call.span_id]
    assert attempt.attributes["http.request.method"] == "POST"
    assert attempt.attributes["http.response.status_code"] == 200
    # The JSON-RPC error: its code is the error, on a span the HTTP caller parents.
    error = named(spans, "no/such/method")
    assert error.trace_id == http_trace and error.parent_span_id == http_span
    assert error.attributes["error.type"] == "-32601"
    assert error.attributes["rpc.response.status_code"] == "-32601"
    assert error.attributes["jsonrpc.request.id"] == "q-1"
    assert error.status_code == STATUS_ERROR
    # A tool call that works is no failure.
    initialize = named(spans, "initialize")
    assert "error.type" not in initialize.attributes
    assert initialize.attributes["mcp.protocol.version"] == "2025-11-25"


async def test_a_bridge_call_has_its_stdio_server_as_a_client_span(
    start_gateway: StartGateway, receiver: OtlpReceiver
) -> None:
    """The bridge's attempt is the request written to its child: a CLIENT span with the MCP
    facts of the call and the answer's `error.type`, the exchange's child."""
    command = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
    gateway = await start_gateway(
        {
            "routes": [{"name": "tools", "prefix": "/", "type": "mcp", "command": command}],
            "rules": [RULE],
            "skills": [SKILL],
            "telemetry": {"otlp_endpoint": receiver.url},
        }
    )
    trace_id, span_id, traceparent = caller_context()
    async with (
        httpx2.AsyncClient(
            headers={"traceparent": traceparent}, timeout=httpx2.Timeout(30, read=300)
        ) as http,
        Client(streamable_http_client(gateway.url + "/mcp", http_client=http)) as client,
    ):
        assert (await client.call_tool("read_note", {"name": "missing"})).is_error
        assert not (await client.call_tool("read_note", {"name": "hello"})).is_error
    spans = await flushed(receiver, 6)
    calls = [s for s in spans if s.kind == SERVER and s.name == "tools/call read_note"]
    assert len(calls) == 2 and all(c.trace_id == trace_id for c in calls)
    failed, worked = sorted(calls, key=lambda c: "error.type" not in c.attributes)
    assert failed.attributes["error.type"] == "tool_error"
    assert failed.attributes["mendpoint.failure.code"] == "NOTE_MISSING"
    for call, error in ((failed, "tool_error"), (worked, None)):
        (attempt,) = [s for s in spans if s.kind == CLIENT and s.parent_span_id == call.span_id]
        assert attempt.name == "tools/call read_note"
        assert attempt.attributes["network.transport"] == "pipe"
        assert attempt.attributes["process.executable.name"] == Path(sys.executable).name
        assert attempt.attributes["mcp.method.name"] == "tools/call"
        assert attempt.attributes["gen_ai.tool.name"] == "read_note"
        assert attempt.attributes["mcp.session.id"] == call.attributes["mcp.session.id"]
        assert attempt.attributes.get("error.type") == error
        assert (attempt.status_code == STATUS_ERROR) == (error is not None)
        assert call.parent_span_id == span_id


@pytest.mark.parametrize("sdk_server", [["json"]], indirect=True)
async def test_at_ratio_zero_a_failing_tool_call_arrives_whole(
    start_gateway: StartGateway, sdk_server: str, receiver: OtlpReceiver
) -> None:
    gateway = await start_gateway(
        {
            "routes": [{"name": "tools", "prefix": "/", "type": "mcp", "upstream": sdk_server}],
            "telemetry": {"otlp_endpoint": receiver.url, "sample_ratio": 0},
        }
    )
    trace_id, caller_span, _ = caller_context()
    unsampled = f"00-{trace_id}-{caller_span}-00"
    async with (
        httpx2.AsyncClient(headers={"traceparent": unsampled}, timeout=30) as http,
        Client(streamable_http_client(gateway.url + "/mcp", http_client=http), mode="legacy") as c,
    ):
        ok = await c.call_tool("read_note", {"name": "hello"})
        assert not ok.is_error
        result = await c.call_tool("read_note", {"name": "missing"})
        assert result.is_error
        assert "mendpoint_failure" in json.dumps(result.model_dump(mode="json"))
    await flushed(receiver, 2)
    await asyncio.sleep(0.5)
    spans = receiver.spans
    servers = [s for s in spans if s.kind == SERVER]
    (failed,) = [s for s in servers if s.attributes.get("gen_ai.tool.name") == "read_note"]
    assert failed.trace_id == trace_id and failed.parent_span_id == caller_span
    assert failed.attributes["mendpoint.sampled_for"] == "failure"
    assert failed.attributes["error.type"] == "tool_error"
    assert failed.attributes["mcp.method.name"] == "tools/call"
    assert "mendpoint.failure.code" in failed.attributes
    clients = [s for s in spans if s.kind == CLIENT and s.parent_span_id == failed.span_id]
    assert len(clients) == 1
    # Only the failure: the initialize, the list and the successful call are not traced.
    assert all(s.attributes.get("mendpoint.sampled_for") == "failure" for s in servers)
