"""MCP messages the suites send (the handshake a client opens a session with, a tool call),
and a bridge session spoken in plain HTTP."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


def bridge_config(command: list[str], **route: Any) -> dict[str, Any]:
    return {
        "admin": None,
        "routes": [{"name": "tools", "type": "mcp", "command": command, **route}],
    }


def call(n: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
DB_RULE: dict[str, Any] = {
    "id": "db-error-reported-as-success",
    "match": {"mcp": {"tool": "query_db", "is_error": False}, "body": "^Database error: "},
    "error": {
        "code": "DATABASE_ERROR",
        "category": "VALIDATION_ERROR",
        "fix_required": "Correct the query as the message says, then call again",
    },
}
"""The opt-in rule for tests/mcp_servers/sdk_server.py's query_db, which reports a database
error as a success (docs/rules.md#failures-reported-as-successes)."""


@dataclass
class RawSession:
    """An MCP session spoken in plain HTTP, to see the exact bytes and status codes."""

    http: aiohttp.ClientSession
    url: str
    headers: dict[str, str] = field(default_factory=dict)

    async def post(self, message: Any, accept: str = "application/json") -> aiohttp.ClientResponse:
        headers = {**self.headers, "Accept": accept, "Content-Type": "application/json"}
        response = await self.http.post(self.url, data=json.dumps(message), headers=headers)
        await response.read()
        return response

    async def start(self) -> aiohttp.ClientResponse:
        response = await self.post(INIT)
        assert response.status == 200, await response.text()
        self.headers["Mcp-Session-Id"] = response.headers["Mcp-Session-Id"]
        assert (await self.post(INITIALIZED)).status == 202
        return response

    async def pids(self) -> tuple[int, int]:
        response = await self.post(call(99, "pids", {}))
        found = json.loads(await response.read())["result"]["structuredContent"]
        return int(found["server"]), int(found["helper"])

    async def delete(self) -> aiohttp.ClientResponse:
        return await self.http.delete(self.url, headers=self.headers)
