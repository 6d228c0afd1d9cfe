"""An MCP server on the official Python SDK's low-level `Server`, for the gateway's tests.

`python lowlevel_server.py CLUSTER_PORT` serves on stdin/stdout. Like mcp-server-kubernetes
(which runs kubectl with whatever arguments it got), its `describe` tool declares an
inputSchema with `required: [resource_type, name]` in tools/list but does not check the call
against it: the low-level server validates nothing, and the tool goes to the cluster at
127.0.0.1:CLUSTER_PORT (a closed port in the tests) with what it was given, so a call without
`name` fails with the connection's own error rather than with a word about the argument.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

CLUSTER = f"http://127.0.0.1:{int(sys.argv[1])}" if len(sys.argv) > 1 else "http://127.0.0.1:9"

DESCRIBE = types.Tool(
    name="describe",
    description="Describe one resource of the cluster.",
    input_schema={
        "type": "object",
        "properties": {"resource_type": {"type": "string"}, "name": {"type": "string"}},
        "required": ["resource_type", "name"],
    },
    annotations=types.ToolAnnotations(read_only_hint=True),
)


async def list_tools(_: Any, __: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[DESCRIBE])


async def call_tool(_: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    url = f"{CLUSTER}/api/{arguments.get('resource_type', '')}/{arguments.get('name', '')}"
    try:
        text = await anyio.to_thread.run_sync(_get, url)
    except (urllib.error.URLError, OSError) as exc:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"Failed to describe: {exc}")],
            is_error=True,
        )
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        body: bytes = answer.read()
    return body.decode()


server = Server("mendpoint-lowlevel-test-server", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
