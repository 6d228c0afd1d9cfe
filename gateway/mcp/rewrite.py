"""Pure rewrites of MCP results: tool errors, JSON-RPC errors and `tools/list` (docs/mcp.md).

Each function takes a decoded message part and returns a new one, or None when it must stay
exactly as the server sent it. Nothing here removes what the server wrote: a tool error keeps
every content item and its `structuredContent`; a JSON-RPC error keeps `code` and `message`,
and its `data`: an object gains one key, any other value moves whole under `mendpoint/data`
of the object that takes its place (docs/mcp.md#json-rpc-errors-whose-data-is-not-an-object).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from gateway.failure import Category, Failure

FAILURE_META_KEY = "mendpoint/failure"
ORIGINAL_DATA_KEY = "mendpoint/data"
"""Where a JSON-RPC error's `data` that is not an object is kept, beside the failure."""
TOOL_FAILURE_KEY = "io.modelcontextprotocol/toolFailure"
# URL elicitation required, and the error codes of the 2026 multi-round and task flows: the
# client acts on them as they are.
UNTOUCHED_ERROR_CODES = frozenset({-32042, -32020, -32021, -32022})
COMPLETE = "complete"
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # built once, not per call

_GOVERNANCE = frozenset(
    {Category.AUTH_REQUIRED, Category.PERMISSION_DENIED, Category.POLICY_DENIED}
)
# The draft's recommended baseline codes (SEP-3313), by category; others keep the rule's code.
_BASELINE_CODES = {
    Category.VALIDATION_ERROR: "invalid_input",
    Category.NOT_FOUND: "resource_not_found",
    Category.AUTH_REQUIRED: "auth_required",
    Category.PERMISSION_DENIED: "permission_denied",
    Category.POLICY_DENIED: "policy_blocked",
}


def is_tool_error(result: Any) -> bool:
    """A final `CallToolResult` with `isError: true` (not an input-required or task result)."""
    return (
        isinstance(result, dict)
        and result.get("isError") is True
        and result.get("resultType", COMPLETE) == COMPLETE
        and "task" not in result
    )


def is_reported_success(result: Any) -> bool:
    """A final `CallToolResult` the server reported as a success (`isError` absent or false)."""
    return (
        isinstance(result, dict)
        and result.get("isError") is not True
        and isinstance(result.get("content"), list)
        and result.get("resultType", COMPLETE) == COMPLETE
        and "task" not in result
    )


def text_items(result: dict[str, Any]) -> list[str]:
    """The texts of the result's text items, in their order."""
    content = result.get("content")
    if not isinstance(content, list):
        return []
    return [
        item["text"]
        for item in content
        if isinstance(item, dict)
        and item.get("type") == "text"
        and isinstance(item.get("text"), str)
    ]


def tool_error_text(result: dict[str, Any]) -> str:
    """The text of the result's text items, joined by newlines: what body rules look at."""
    return "\n".join(text_items(result))


def upgraded_tool_result(
    result: dict[str, Any],
    payload: dict[str, Any],
    text_key: str,
    tool_failure: dict[str, Any] | None,
    by_reference: bool = False,
) -> dict[str, Any]:
    """The result plus one text item holding the failure, and the same under `_meta`.

    `by_reference` (the compact form): `_meta` holds `{"content_index": N}`, the index of
    that text item, instead of a second copy of the object.
    """
    upgraded = dict(result)
    content = result.get("content")
    items = list(content) if isinstance(content, list) else []
    text = _COMPACT.encode({text_key: payload})
    items.append({"type": "text", "text": text})
    upgraded["content"] = items
    meta = result.get("_meta")
    merged = dict(meta) if isinstance(meta, dict) else {}
    # Ours: a server's look-alike never stands for it.
    merged[FAILURE_META_KEY] = {"content_index": len(items) - 1} if by_reference else payload
    if tool_failure is not None:
        # An intermediary must relay a server's own classification unchanged (SEP-3313).
        merged.setdefault(TOOL_FAILURE_KEY, tool_failure)
    if isinstance(meta, dict) or meta is None:
        upgraded["_meta"] = merged
    return upgraded


def upgraded_error(error: Any, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The error with the failure under `data` (added, or merged as a key), or None to keep it.

    JSON-RPC lets `data` be any value, and the Python SDK's servers send strings (`""` with
    -32602, the method's name with -32601). The SDK clients hand an agent `code`, `message`
    and `data` and drop any other member of the error, so the failure can only travel in
    `data`: a value that is not an object goes, unchanged, under `mendpoint/data` of a new
    object that also holds the failure.
    """
    if not isinstance(error, dict) or error.get("code") in UNTOUCHED_ERROR_CODES:
        return None
    data = error.get("data", None)
    if "data" in error and not isinstance(data, dict):
        return {**error, "data": {ORIGINAL_DATA_KEY: data, FAILURE_META_KEY: payload}}
    merged = dict(data) if isinstance(data, dict) else {}
    merged[FAILURE_META_KEY] = payload  # ours: a server's look-alike never stands for it
    return {**error, "data": merged}


def guided_tools_list(result: Any, sentence: str) -> dict[str, Any] | None:
    """Each tool's description with the guidance sentence appended once; None if unchanged."""
    if not sentence or not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return None
    changed = False
    tools: list[Any] = []
    for tool in result["tools"]:
        if isinstance(tool, dict):
            description = tool.get("description")
            if description is None or (
                isinstance(description, str) and sentence not in description
            ):
                text = f"{description} {sentence}" if description else sentence
                tool = {**tool, "description": text}
                changed = True
        tools.append(tool)
    return {**result, "tools": tools} if changed else None


def draft_class(failure: Failure) -> str | None:
    """The draft's class for a failure, or None when nothing specific is known about it."""
    if failure.retryable:
        return "reliability"
    if failure.category in _GOVERNANCE:
        return "governance"
    if failure.category is Category.UPSTREAM_ERROR:
        return None
    return "capability"


def tool_failure(
    failure: Failure, correlation_id: str, now_ms: int | None = None
) -> dict[str, Any]:
    """The failure in the shape of the draft tool-failure extension (SEP-3313 / PR #3312).

    `retryable` is only meaningful (and only present) for the `reliability` class, and
    `retryNotBefore` is Unix epoch milliseconds, as the draft defines them. A failure no
    specific rule recognised (category UPSTREAM_ERROR, not retryable: "the tool failed, we
    do not know why") claims no class: `capability` would tell the agent "must not
    auto-retry" with no evidence, and the draft has no "unknown" value.
    """
    failure_class = draft_class(failure)
    shape: dict[str, Any] = {
        "code": _BASELINE_CODES.get(failure.category, failure.code.lower()),
        "correlationId": correlation_id,
    }
    if failure_class is not None:
        shape = {"class": failure_class, **shape}
    if failure_class == "reliability":
        shape["code"] = "retryable_transient_error"
        shape["retryable"] = True
        if failure.retry_after_ms is not None:
            now = now_ms if now_ms is not None else int(datetime.now(UTC).timestamp() * 1000)
            shape["retryNotBefore"] = now + failure.retry_after_ms
    guidance = failure.fix_required or (
        "Retry the identical call after retryNotBefore" if failure.retryable else None
    )
    if guidance is not None:
        shape["agentGuidance"] = guidance
    return shape
