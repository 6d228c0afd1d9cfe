"""`decide`: one reading for every shape the gateway emits, whatever a client got it as.

It takes an MCP `CallToolResult` (an SDK model, fastmcp's dataclass, or the wire dict), a
JSON-RPC error (an `McpError`/`MCPError`, an `ErrorData`, or the wire dict, bare or in its
response), an HTTP response (`HttpAnswer`, or anything with `status_code`, `headers` and
`content`: httpx's and requests' responses), or text a framework made of a failed result.
The tables of `mendpoint_agents.http_answers` and `mendpoint_agents.mcp_results` say where
each shape's fields are; `mendpoint_agents.decision` says what the fields lead to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mendpoint_agents.decision import Decision
from mendpoint_agents.http_answers import DEFAULT_PREFIX, HttpAnswer, decide_http
from mendpoint_agents.mcp_results import (
    DEFAULT_FAILURE_KEY,
    decide_jsonrpc_error,
    decide_text,
    decide_tool_result,
    is_tool_result,
    jsonrpc_error,
)


def decide(
    result: Any,
    *,
    run_fixes: bool = False,
    header_prefix: str = DEFAULT_PREFIX,
    failure_key: str = DEFAULT_FAILURE_KEY,
) -> Decision:
    """What to do after one call: `ok`, `retry`, `run_fix`, `fix` or `stop`.

    `run_fixes`: the caller runs a failure's `fix_command` itself (`run_fix`); without it
    such a failure is `fix`. `header_prefix` is the route's `headers.prefix`; `failure_key`
    its `mcp.failure_key`. A value that is none of the shapes above raises `TypeError`.
    """
    if isinstance(result, HttpAnswer):
        return decide_http(
            result.status, result.headers, result.body, prefix=header_prefix, run_fixes=run_fixes
        )
    status = getattr(result, "status_code", None)
    if isinstance(status, int) and hasattr(result, "headers") and hasattr(result, "content"):
        body = result.content
        return decide_http(
            status, result.headers, bytes(body), prefix=header_prefix, run_fixes=run_fixes
        )
    if isinstance(result, str):
        return decide_text(result, failure_key=failure_key, run_fixes=run_fixes)
    if isinstance(result, Mapping) and isinstance(result.get("result"), Mapping):
        result = result["result"]  # a whole JSON-RPC response
    if is_tool_result(result):
        return decide_tool_result(result, failure_key=failure_key, run_fixes=run_fixes)
    error = jsonrpc_error(result)
    if error is not None:
        return decide_jsonrpc_error(error, run_fixes=run_fixes)
    raise TypeError(f"decide() cannot read a {type(result).__name__}")
