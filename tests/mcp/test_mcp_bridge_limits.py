"""The bridge with large messages (docs/mcp.md, "The bridge"): an answer over
`mcp.max_message_bytes` becomes a JSON-RPC error for its request and the session goes on; an
answer under it but over the SDK client's 1 MiB cap on SSE events still arrives, because a
single answer goes out as JSON."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.support.gateway import StartGateway
from tests.support.paths import MCP_SERVERS

SDK_STDIO = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]


def bridge(**mcp: Any) -> dict[str, Any]:
    route = {"name": "tools", "type": "mcp", "command": SDK_STDIO}
    return {"admin": None, "routes": [route], "mcp": mcp}


async def test_an_answer_over_the_limit_is_an_error_and_the_session_goes_on(
    start_gateway: StartGateway,
) -> None:
    gateway = await start_gateway(bridge(max_message_bytes=64 * 1024))
    async with Client(gateway.url + "/mcp", read_timeout_seconds=20) as client:
        small = await client.call_tool("big", {"size": 1000})
        assert small.is_error is not True
        with pytest.raises(MCPError, match="over the gateway's message limit"):
            await client.call_tool("big", {"size": 200_000})
        after = await client.call_tool("add", {"a": 1, "b": 2})
        assert after.structured_content == {"result": 3}
