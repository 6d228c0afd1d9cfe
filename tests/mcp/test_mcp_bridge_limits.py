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


async def test_a_result_over_one_mib_reaches_the_sdk_client(start_gateway: StartGateway) -> None:
    """The Python SDK caps SSE events at 1 MiB; over stdio the same result works."""
    gateway = await start_gateway(bridge())
    async with Client(gateway.url + "/mcp") as client:
        result = await client.call_tool("big", {"size": 1_100_000})
        assert result.is_error is not True
        assert len(result.content[0].text) == 1_100_000  # type: ignore[union-attr]


EVERYTHING = MCP_SERVERS / "node_modules" / ".bin" / "mcp-server-everything"


async def test_progress_during_a_call_still_streams(start_gateway: StartGateway) -> None:
    """Server messages sent while the call runs make the answer an event stream again."""
    route = {"name": "tools", "type": "mcp", "command": [str(EVERYTHING), "stdio"]}
    gateway = await start_gateway({"admin": None, "routes": [route]})
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(gateway.url + "/mcp", mode="legacy") as client:
        result = await client.call_tool(
            "trigger-long-running-operation",
            {"duration": 1, "steps": 3},
            progress_callback=on_progress,
        )
        assert "completed" in result.content[0].text  # type: ignore[union-attr]
    assert seen == [1, 2, 3]
