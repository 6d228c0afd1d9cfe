"""Failures reported as successes become visible, never changed.

A tool result with `isError` absent or false whose text reads as a failure passes through
byte for byte (the contract), and is counted per tool as a gaps signature of status
`mcp:reported_success` (docs/operations.md#gaps), so an operator can write the opt-in
`match.mcp.is_error: false` rule (docs/rules.md#failures-reported-as-successes). Real
successes are neither counted nor parsed past a bounded byte scan.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from gateway.mcp.reported_failures import (
    REPORTED_SUCCESS,
    SCAN_BYTES,
    failure_text,
    may_report_failure,
)
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream, route_config
from tests.support.mcp import DB_RULE, INIT

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

FAILURE_TEXTS = [
    "Error: connection refused",
    "error setting key 'a'",
    "  Failed to open /tmp/x",
    "[ERROR] upstream said no",
    "Traceback (most recent call last):\n  File ...",
    "Database error: no such table: widgets",
    "Query failed: syntax error near 'FROM'",
    "Could not resolve host example.invalid",
    "Permission denied: /etc/shadow",
    "No such file or directory: notes.txt",
    '{"error": "not allowed"}',
    '{\n  "error": "File not found: deck.pptx"\n}',
    "Security violation: Command 'rm' is not allowed",
    "Key not found: vegetable",
    "Invalid timezone: 'Mars'",
]
SUCCESS_TEXTS = [
    "42",
    "Here are the 3 files you asked for",
    "The build finished without errors",
    "Errors: none",
    "error_count=0",
    "Failedness is not a word",
    "Some words before the error: none of them the first",
    '{"errors": [], "ok": true}',
]


def response(text: str, **result: Any) -> bytes:
    body = {"content": [{"type": "text", "text": text}], **result}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "result": body}).encode()


@pytest.mark.parametrize("text", FAILURE_TEXTS)
def test_a_text_that_begins_with_a_failure_is_picked_and_confirmed(text: str) -> None:
    raw = response(text)
    assert may_report_failure(raw)
    assert failure_text(json.loads(raw)["result"]) == text


@pytest.mark.parametrize("text", SUCCESS_TEXTS)
def test_a_success_is_neither_picked_nor_confirmed(text: str) -> None:
    raw = response(text)
    assert not may_report_failure(raw)
    assert failure_text(json.loads(raw)["result"]) is None


def test_the_scan_is_bounded() -> None:
    """Past `SCAN_BYTES` nothing is looked at: a huge success costs the same as a small one."""

    def padded(pad_first: bool) -> bytes:
        pad = {"pad": "y" * SCAN_BYTES}
        content = {"content": [{"type": "text", "text": "Error: too far in"}]}
        result = {**pad, **content} if pad_first else {**content, **pad}
        return json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode()

    assert may_report_failure(padded(pad_first=False))  # within the bound: picked
    assert not may_report_failure(padded(pad_first=True))  # the same text past it: not


@given(
    lead=st.sampled_from(["", " ", "\t", "\n", "  "]),
    words=st.sampled_from(FAILURE_TEXTS),
    spaced=st.booleans(),
)
def test_whatever_the_decoded_check_confirms_the_scan_picks(
    lead: str, words: str, spaced: bool
) -> None:
    """The scan never misses what the check on the decoded text would count (within the
    scanned bytes), whatever the JSON's spacing and escapes."""
    result = {"content": [{"type": "text", "text": lead + words}]}
    message = {"jsonrpc": "2.0", "id": 1, "result": result}
    raw = json.dumps(message, separators=(", ", ": ") if spaced else (",", ":")).encode()
    assert failure_text(result) is not None
    assert may_report_failure(raw)


def fixed_app(body: bytes) -> web.Application:
    """An MCP server over HTTP answering every call with the same bytes (the id is 7)."""

    async def mcp(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/mcp", mcp)
    return app


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


async def post(base: str, message: dict[str, Any]) -> bytes:
    async with (
        aiohttp.ClientSession() as session,
        session.post(base + "/mcp", json=message, headers=HEADERS) as answer,
    ):
        assert answer.status == 200
        return await answer.read()


def reported(gateway: RunningGateway) -> list[tuple[str, str, int]]:
    return [
        (gap.signature.route, gap.signature.text, gap.count)
        for gap in gateway.server.signatures.top()
        if gap.signature.status == REPORTED_SUCCESS
    ]


@pytest.mark.parametrize("mode", ["additive", "original"])
async def test_the_bytes_go_through_unchanged_and_the_tool_is_counted(
    start_gateway: StartGateway, start_upstream: StartUpstream, mode: str
) -> None:
    sent = (
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":'
        b'"Error setting key \'k\': server is read-only"}],"isError":false}}'
    )
    upstream = await start_upstream(fixed_app(sent))
    gateway = await start_gateway(route_config(upstream, type="mcp", mode=mode))
    for _ in range(3):
        assert await post(gateway.url, call("set_key", key="k")) == sent
        assert await post(upstream, call("set_key", key="k")) == sent  # the same as direct
    assert reported(gateway) == [("api", "set_key: Error setting key '…': server is read-only", 3)]


async def test_a_success_is_not_counted(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    sent = response("Here are the 3 files you asked for").replace(b'"id": 1', b'"id": 7')
    gateway = await start_gateway(route_config(await start_upstream(fixed_app(sent)), type="mcp"))
    assert await post(gateway.url, call("list_files")) == sent
    assert gateway.server.signatures.top() == []


@pytest.mark.parametrize("sdk_server", [["json", "stateless"]], ids=["json"], indirect=True)
async def test_the_sdk_server_through_the_sdk_client_and_the_gaps_endpoint(
    start_gateway: StartGateway, sdk_server: str
) -> None:
    """The SDK's query_db reports a database error as a success: the client sees the
    server's result, /gaps lists it per tool; once the opt-in rule names it, it is a
    failure the client is told about, and it is no longer counted as reported."""
    gateway = await start_gateway(route_config(sdk_server, type="mcp"), admin="127.0.0.1:0")
    async with Client(gateway.url + "/mcp", mode="legacy") as client:
        db = await client.call_tool("query_db", {"sql": "select * from widgets"})
        assert db.is_error is not True
        assert [c.text for c in db.content] == [  # type: ignore[union-attr]
            "Database error: no such table: widgets"
        ]
        assert (await client.call_tool("query_db", {"sql": "select 1"})).is_error is not True
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    async with gateway.session.get(f"http://{host}:{port}/gaps") as answer:
        rows = json.loads(await answer.read())["signatures"]
    assert [(r["route"], r["status"], r["signature"], r["count"]) for r in rows] == [
        ("api", REPORTED_SUCCESS, "query_db: Database error: no such table: widgets", 1)
    ]

    opted_in = await start_gateway({**route_config(sdk_server, type="mcp"), "rules": [DB_RULE]})
    async with Client(opted_in.url + "/mcp", mode="legacy") as client:
        db = await client.call_tool("query_db", {"sql": "select * from widgets"})
        assert db.is_error is True
    assert reported(opted_in) == []


async def test_an_initialize_is_never_counted(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    """Only a `tools/call` result is a tool's answer: an `initialize` whose instructions
    begin with "Error" is the server's contract, not a failure."""
    sent = (
        b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25",'
        b'"capabilities":{},"serverInfo":{"name":"x","version":"1"},'
        b'"content":[{"type":"text","text":"Error handling is documented"}]}}'
    )
    gateway = await start_gateway(route_config(await start_upstream(fixed_app(sent)), type="mcp"))
    assert await post(gateway.url, INIT) == sent
    assert gateway.server.signatures.top() == []
