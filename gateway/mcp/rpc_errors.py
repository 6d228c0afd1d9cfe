"""Every JSON-RPC error the gateway makes itself, and the HTTP refusal that carries one.

The gateway answers with a JSON-RPC error of its own in three cases: a request it refuses
before any server sees it (no session, unknown session, a body that is not JSON-RPC, too many
sessions), sent as an HTTP answer with `"id": null` in the shape MCP clients parse; a request
whose server exited before answering (`server_gone`), so a client waiting on that id is
released; and a request whose answer is over `mcp.max_message_bytes` (`too_large`). Errors a
server sends are never built here: they are relayed, or upgraded by `rewrite`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gateway.header_names import REQUEST_ID

if TYPE_CHECKING:
    from aiohttp import web

PARSE_ERROR = -32700
"""JSON-RPC: the body is not JSON, or not a JSON-RPC message."""
SERVER_ERROR = -32000
"""JSON-RPC's implementation-defined server error: the gateway's refusals, `server_gone` and
`too_large` (the code the MCP SDKs use for a missing session id)."""
SESSION_NOT_FOUND = -32001
"""The session id names no session (it ended, or never existed); MCP clients start anew."""


def error_response(
    request_id: Any, code: int, message: str, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A JSON-RPC error response for `request_id` (None when no request can be named)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def server_gone(request_id: Any, method: str) -> dict[str, Any]:
    """The answer to a request whose server exited first: a client waiting on it is released."""
    return error_response(
        request_id, SERVER_ERROR, f"The MCP server exited before answering {method}"
    )


def too_large(request_id: Any, method: str, size: int, limit: int) -> dict[str, Any]:
    """The answer to a request whose response passed the relay's message limit."""
    return error_response(
        request_id,
        SERVER_ERROR,
        f"The MCP server's answer to {method} ({size} bytes) is over the gateway's "
        f"message limit (mcp.max_message_bytes: {limit})",
        {"size": size, "max_message_bytes": limit},
    )


def rpc_refusal(
    status: int, code: int, message: str, request_id: str, data: dict[str, Any] | None = None
) -> web.Response:
    """An HTTP refusal whose body is a JSON-RPC error with no id; `request_id` is the
    gateway's X-Request-Id, not a JSON-RPC id."""
    from aiohttp import web  # here: `mendpoint stdio` never answers HTTP, and starts sooner

    error = error_response(None, code, message, data)
    body = json.dumps(error, separators=(",", ":")).encode()
    return web.Response(
        status=status,
        body=body,
        headers={"Content-Type": "application/json", REQUEST_ID: request_id},
    )


__all__ = [
    "PARSE_ERROR",
    "SERVER_ERROR",
    "SESSION_NOT_FOUND",
    "error_response",
    "rpc_refusal",
    "server_gone",
    "too_large",
]
