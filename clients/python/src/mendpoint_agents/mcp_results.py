"""Deciding on what an MCP client gets back (docs/mcp.md, How failures are upgraded).

    what came back                      where the payload is                       Source
    ----------------------------------  -----------------------------------------  -------------
    a result, `isError` absent/false    (a success)                                success
    a result with `isError: true`       `_meta["mendpoint/failure"]` (or, compact,  tool-result
                                        the text item at its `content_index`), else
                                        the appended text item `{KEY: payload}`
    a JSON-RPC error                    `error.data["mendpoint/failure"]`           jsonrpc-error
    text a framework made of a result   the `{KEY: payload}` item inside it         text
    any of these without a payload      nothing: stop with the text                 none

KEY is the gateway's `mcp.failure_key` (default `mendpoint_failure`). The draft
`io.modelcontextprotocol/toolFailure` object is not read: the gateway always writes its own
payload beside it, so a `toolFailure` alone is the server's word, not the gateway's.

Results and errors are read as the SDKs hand them over or as wire dicts: `mcp.types`
models (1.x `isError`/`meta`, 2.x `is_error`/`meta`), fastmcp's `CallToolResult`, an
`McpError`/`MCPError` (its `.error`), or the JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mendpoint_agents.decision import OK, Decision, Source, choose, stop_with
from mendpoint_agents.fields import payload_fields

META_KEY = "mendpoint/failure"
DEFAULT_FAILURE_KEY = "mendpoint_failure"
MAX_TEXT = 2000


def is_tool_result(value: Any) -> bool:
    """A `CallToolResult`, as a model, a dataclass or a wire dict."""
    if isinstance(value, Mapping):
        return "content" in value
    return hasattr(value, "content") and (hasattr(value, "is_error") or hasattr(value, "isError"))


def decide_tool_result(
    result: Any, *, failure_key: str = DEFAULT_FAILURE_KEY, run_fixes: bool = False
) -> Decision:
    if not _flag(result):
        return OK
    texts = _texts(_get(result, "content", "content") or [])
    payload = _meta_payload(_get(result, "_meta", "meta"), texts)
    if payload is None:
        payload = next(
            (p for t in reversed(texts) if (p := _item_payload(t, failure_key)) is not None), None
        )
    fields = payload_fields(payload)
    if fields is None:
        return stop_with(_joined(texts))
    return choose(fields, Source.TOOL_RESULT, run_fixes=run_fixes)


def jsonrpc_error(value: Any) -> Mapping[str, Any] | None:
    """A JSON-RPC error as a mapping (`code`, `message`, `data`), or None when it is not one:
    a wire error object, a whole error response, an `ErrorData` or an `McpError`."""
    if isinstance(value, Mapping):
        if isinstance(value.get("error"), Mapping) and "jsonrpc" in value:
            value = value["error"]
        code, message = value.get("code"), value.get("message")
        if isinstance(code, int) and isinstance(message, str):
            return {"code": code, "message": message, "data": value.get("data")}
        return None
    error = getattr(value, "error", value)
    code, message = getattr(error, "code", None), getattr(error, "message", None)
    if isinstance(code, int) and isinstance(message, str):
        return {"code": code, "message": message, "data": getattr(error, "data", None)}
    return None


def decide_jsonrpc_error(error: Mapping[str, Any], *, run_fixes: bool = False) -> Decision:
    data = error.get("data")
    payload = data.get(META_KEY) if isinstance(data, Mapping) else None
    fields = payload_fields(payload)
    message = str(error.get("message", ""))
    if fields is None:
        return stop_with(message, code=None)
    return choose(fields, Source.JSONRPC_ERROR, run_fixes=run_fixes)


def decide_text(
    text: str, *, failure_key: str = DEFAULT_FAILURE_KEY, run_fixes: bool = False
) -> Decision:
    """The decision for a failure a framework turned into text (pydantic-ai's `ModelRetry`
    message, a LangChain `ToolException`): the `{KEY: payload}` item found inside it, as it
    stands or JSON-encoded once more (a list of the items' texts). No item: stop."""
    payload = _item_payload(text, failure_key)
    fields = payload_fields(payload)
    if fields is None:
        return stop_with(text[:MAX_TEXT])
    return choose(fields, Source.TEXT, run_fixes=run_fixes)


def _meta_payload(meta: Any, texts: Sequence[str]) -> Any:
    if not isinstance(meta, Mapping):
        return None
    payload = meta.get(META_KEY)
    if isinstance(payload, Mapping) and set(payload) == {"content_index"}:  # the compact form
        index = payload["content_index"]
        if not isinstance(index, int) or not 0 <= index < len(texts):
            return None
        item = _loads(texts[index])
        values = list(item.values()) if isinstance(item, Mapping) else []
        return values[0] if len(values) == 1 else None
    return payload


def _item_payload(text: str, key: str, depth: int = 0) -> Any:
    """The payload of a `{KEY: payload}` text item: the whole text, an item inside a JSON list
    of texts, or an item inside longer text (found by its opening and parsed from there)."""
    whole = _loads(text)
    if isinstance(whole, Mapping) and key in whole:
        return whole[key]
    if isinstance(whole, list) and depth == 0:  # the items' texts, each decoded or not
        for item in reversed(whole):
            if isinstance(item, Mapping) and key in item:
                return item[key]
            if isinstance(item, str) and (found := _item_payload(item, key, 1)) is not None:
                return found
    opening = "{" + json.dumps(key) + ":"
    start = text.rfind(opening)
    if start < 0:
        return None
    try:
        item, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return item.get(key) if isinstance(item, dict) else None


def _flag(result: Any) -> bool:
    """`isError` on the wire and in 1.x models, `is_error` in 2.x models and fastmcp's."""
    if isinstance(result, Mapping):
        return result.get("isError") is True
    flag = getattr(result, "is_error", None)  # read first: fastmcp deprecates 2.x's `isError`
    if flag is None:
        flag = getattr(result, "isError", None)
    return flag is True


def _get(value: Any, key: str, attribute: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(key)
    return getattr(value, attribute, None)


def _texts(content: Any) -> list[str]:
    """The text of each content item, "" for items that are not text (indexes kept)."""
    if not isinstance(content, Sequence):
        return []
    texts = []
    for item in content:
        kind, text = _get(item, "type", "type"), _get(item, "text", "text")
        texts.append(text if kind == "text" and isinstance(text, str) else "")
    return texts


def _joined(texts: Sequence[str]) -> str:
    return "\n".join(t for t in texts if t)[:MAX_TEXT]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
