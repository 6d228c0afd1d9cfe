"""A tool's failure that is about one of its arguments is the caller's to fix, naming the
argument (docs/rules.md#arguments-named-in-a-failure): through `mendpoint stdio` in front of
the official Python SDK's server, whose tools raise as real ones do. The text names an
argument of the tool's inputSchema ("Unsupported operation: cube"), is only the value the
call sent (a KeyError's text, passed on), or refuses the only argument the tool takes
(math's "math domain error"); a failure about none of them stays the tool's own. A refused
credential is the caller's to fix only where the tool takes it as an argument
(docs/rules.md#whose-credentials)."""

from __future__ import annotations

import json
import sys
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.paths import MCP_SERVERS

SDK_SERVER = [str(MCP_SERVERS / "sdk_server.py"), "stdio"]
MENDPOINT = ["-m", "gateway", "--log-level", "warning", "stdio", "--", sys.executable]


async def _errors(calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The gateway's `error` object for each call, after the client listed the tools."""
    params = StdioServerParameters(command=sys.executable, args=[*MENDPOINT, *SDK_SERVER])
    out = []
    async with Client(params) as client:
        await client.list_tools()
        for tool, arguments in calls:
            result = await client.call_tool(tool, arguments)
            assert result.is_error is True, tool
            last = result.content[-1]
            assert last.type == "text"
            out.append(json.loads(last.text)["mendpoint_failure"]["error"])
    return out


async def test_a_failure_about_an_argument_names_it_as_the_fix() -> None:
    named, only, single, other = await _errors(
        [
            ("convert", {"operation": "cube", "value": 2}),
            ("note_by_id", {"note_id": "n-9"}),
            ("square_root", {"number": "-1"}),
            ("frobnicate", {}),
        ]
    )
    assert (named["code"], named["retryable"]) == ("INVALID_ARGUMENTS", False)
    assert named["message"] == "Error executing tool convert: Unsupported operation: cube"
    assert "operation argument" in named["fix_required"]
    assert only["code"] == "INVALID_ARGUMENTS" and "note_id" in only["fix_required"]
    assert only["message"] == "Error executing tool note_by_id: 'n-9'"
    assert single["code"] == "INVALID_ARGUMENTS" and "number argument" in single["fix_required"]
    assert single["message"] == "Error executing tool square_root: math domain error"
    assert other["code"] == "TOOL_ERROR" and other["fix_required"] is None


async def test_a_refused_credential_is_the_callers_only_when_an_argument_carries_it() -> None:
    own, given = await _errors(
        [
            ("list_issues", {"repo": "acme/app"}),
            ("list_issues_as", {"repo": "acme/app", "api_key": "k-1"}),
        ]
    )
    assert (own["code"], own["retryable"], own["fix_required"]) == (
        "UPSTREAM_AUTH_REQUIRED",
        False,
        None,
    )
    assert "operator" in own["suggestion"]
    assert given["code"] == "UPSTREAM_AUTH_REQUIRED" and given["retryable"] is False
    assert "api_key argument" in given["fix_required"]
