"""`decide` on what real gateway processes answer: every HTTP mode in front of the orders API
(`mendpoint serve`), and every MCP shape in front of the tools server (`mendpoint stdio`),
read through the official MCP client, as models and as wire dicts."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from agents_live import Api, orders_behind_gateway, stdio_command, stdio_config
from mendpoint_agents import Action, Decision, HttpAnswer, Source, decide, decide_text

FIX_400 = "Correct the request as the message describes, then reissue it"
FIX_SPRING = "Send the 'quantity' request parameter, then reissue"
FIX_TOKEN = "Refresh the access token, then call again"


def request(api: Api, mode: str, what: str) -> httpx.Response:
    headers = {"X-Error-Format": mode}
    method, path, body = {
        "transient": ("GET", f"/quota/{uuid.uuid4().hex}", None),
        "correctable": ("POST", "/orders", {"qty": 0}),
        "spring": ("POST", "/spring", {}),
        "legacy": ("POST", "/legacy", {}),
        "terminal": ("GET", "/items/9", None),
        "applied": ("POST", "/mail", {}),
        "command": ("GET", "/me", None),
        "success": ("GET", "/items/1", None),
    }[what]
    return httpx.request(method, api.gateway + path, json=body, headers=headers)


# (mode, scenario) -> action, code, source, fix_required; `run_fixes` is off.
HTTP_CASES: list[tuple[str, str, Action, str | None, Source, str | None]] = [
    ("additive", "transient", Action.RETRY, "RATE_LIMITED", Source.ADDITIVE, None),
    ("additive", "correctable", Action.FIX, "BAD_REQUEST", Source.ADDITIVE, FIX_400),
    ("additive", "spring", Action.FIX, "MISSING_PARAMETER", Source.ADDITIVE_FAILURE, FIX_SPRING),
    ("additive", "legacy", Action.FIX, "BAD_REQUEST", Source.ADDITIVE, FIX_400),
    ("additive", "terminal", Action.STOP, "NOT_FOUND", Source.ADDITIVE, None),
    ("additive", "applied", Action.STOP, "SERVICE_UNAVAILABLE", Source.ADDITIVE, None),
    ("additive", "command", Action.FIX, "TOKEN_EXPIRED", Source.ADDITIVE_FAILURE, FIX_TOKEN),
    ("additive", "success", Action.OK, None, Source.SUCCESS, None),
    ("envelope", "transient", Action.RETRY, "RATE_LIMITED", Source.ENVELOPE, None),
    ("envelope", "spring", Action.FIX, "MISSING_PARAMETER", Source.ENVELOPE, FIX_SPRING),
    ("envelope", "terminal", Action.STOP, "NOT_FOUND", Source.ENVELOPE, None),
    ("envelope", "command", Action.FIX, "TOKEN_EXPIRED", Source.ENVELOPE, FIX_TOKEN),
    ("headers", "transient", Action.RETRY, "RATE_LIMITED", Source.HEADERS, None),
    # Headers carry no fix: a correctable failure reads as stop, with its code.
    ("headers", "correctable", Action.STOP, "BAD_REQUEST", Source.HEADERS, None),
    ("headers", "terminal", Action.STOP, "NOT_FOUND", Source.HEADERS, None),
    ("original", "transient", Action.STOP, None, Source.NONE, None),
    ("original", "correctable", Action.STOP, None, Source.NONE, None),
]


@pytest.mark.parametrize(
    ("mode", "what", "action", "code", "source", "fix"),
    HTTP_CASES,
    ids=[f"{c[0]}-{c[1]}" for c in HTTP_CASES],
)
def test_every_http_mode_reads_the_same_ladder(
    api: Api,
    mode: str,
    what: str,
    action: Action,
    code: str | None,
    source: Source,
    fix: str | None,
) -> None:
    response = request(api, mode, what)
    decision = decide(response)
    assert (decision.action, decision.code, decision.source) == (action, code, source)
    assert decision.fix_required == fix
    same = decide(
        HttpAnswer(response.status_code, list(response.headers.items()), response.content)
    )
    assert same == decision
    if action is Action.STOP and source is Source.NONE:
        assert decision.message == response.text.strip()  # the raw text, for the model


def test_retry_after_comes_from_the_body_or_the_header(api: Api) -> None:
    """The body's `retry_after_ms` (the API's own 0.2 s); headers mode has only the
    gateway's `Retry-After`, whole seconds rounded up."""
    assert decide(request(api, "additive", "transient")).retry_after_ms == 200
    assert decide(request(api, "envelope", "transient")).retry_after_ms == 200
    assert decide(request(api, "headers", "transient")).retry_after_ms == 1000


def test_an_upstreams_own_retryable_is_not_the_gateways(api: Api) -> None:
    """/legacy's `error` object says `retryable: true` itself; additive mode keeps it, and
    adds `failure.retryable: false` and `X-Error-Retryable: false` beside it."""
    response = request(api, "additive", "legacy")
    assert response.json()["error"]["retryable"] is True
    assert response.json()["failure"]["retryable"] is False
    assert decide(response).action is Action.FIX


def test_run_fix_only_when_the_caller_opts_in(api: Api) -> None:
    response = request(api, "additive", "command")
    assert decide(response).action is Action.FIX
    opted = decide(response, run_fixes=True)
    assert opted.action is Action.RUN_FIX
    assert opted.fix_command == f"touch {api.token_file}"


def test_the_header_prefix_is_the_routes(tmp_path: Path) -> None:
    with orders_behind_gateway(tmp_path, {"headers": {"prefix": "X-Fail-"}}) as api:
        response = request(api, "headers", "transient")
        assert response.headers["X-Fail-Retryable"] == "true"
        assert decide(response).source is Source.NONE
        assert decide(response, header_prefix="X-Fail-").action is Action.RETRY


@asynccontextmanager
async def tools(tmp_path: Path, config: dict[str, Any], *args: str) -> AsyncIterator[ClientSession]:
    command = stdio_command(stdio_config(tmp_path, config), *args)
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


MCP_CASES = [
    ("search", {"query": "q"}, Action.RETRY, "RATE_LIMITED", 200),
    ("read_note", {"name": "todo"}, Action.FIX, "FILE_NOT_FOUND", None),
    ("frobnicate", {}, Action.STOP, "TOOL_ERROR", None),
    ("send_report", {"day": "mon"}, Action.STOP, "UPSTREAM_UNAVAILABLE", None),
    ("read_note", {"name": "hello"}, Action.OK, None, None),
]


@pytest.mark.parametrize(
    "mcp",
    [{}, {"compact": True}, {"failure_key": "failure_item"}],
    ids=["full", "compact", "own-key"],
)
async def test_every_tool_result_shape_reads_the_same_ladder(
    tmp_path: Path, mcp: dict[str, Any]
) -> None:
    key = mcp.get("failure_key", "mendpoint_failure")
    async with tools(tmp_path, {"mcp": mcp} if mcp else {}) as session:
        for tool, arguments, action, code, delay in MCP_CASES:
            result = await session.call_tool(tool, arguments)
            wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            for shape in (result, wire):
                decision = decide(shape, failure_key=key)
                assert (decision.action, decision.code, decision.retry_after_ms) == (
                    action,
                    code,
                    delay,
                ), tool
            if action is not Action.OK:
                assert decide(result).source is Source.TOOL_RESULT
                # The text item alone, as a framework that drops `_meta` hands it over.
                texts = "\n".join(item["text"] for item in wire["content"])
                assert decide_text(texts, failure_key=key).code == code


async def test_a_jsonrpc_error_reads_from_its_data(tmp_path: Path) -> None:
    async with tools(tmp_path, {}) as session:
        with pytest.raises(MCPError) as raised:
            await session.read_resource("notes://nothing")
    data = raised.value.error.data
    assert isinstance(data, dict) and "mendpoint/failure" in data
    decision = decide(raised.value)
    assert decision.source is Source.JSONRPC_ERROR
    assert decision.code == data["mendpoint/failure"]["error"]["code"]
    wire = {"jsonrpc": "2.0", "id": 3, "error": raised.value.error.model_dump(mode="json")}
    assert decide(wire) == decision


async def test_original_mode_leaves_nothing_to_read(tmp_path: Path) -> None:
    async with tools(tmp_path, {}, "--mode", "original") as session:
        result = await session.call_tool("frobnicate", {})
    decision = decide(result)
    assert decision == Decision(Action.STOP, message=decision.message, source=Source.NONE)
    assert "frobnicator is out of phase" in decision.message


def test_what_is_no_shape_is_refused() -> None:
    with pytest.raises(TypeError):
        decide(42)
