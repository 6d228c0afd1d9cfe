"""An MCP server written with the official Python SDK, for the gateway's tests.

`python sdk_server.py stdio` serves on stdin/stdout; `python sdk_server.py http PORT [json]
[stateless]` serves Streamable HTTP on 127.0.0.1:PORT/mcp. Its tools fail the way real tools
do: by raising, which the SDK turns into a result with `isError: true`.
"""

from __future__ import annotations

import os
import subprocess
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("mendpoint-test-server")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


@server.tool()
def read_note(name: str) -> str:
    """Read a note by name; only 'hello' exists."""
    if name != "hello":
        raise ToolError(f"ENOENT: no such file or directory, open '{name}'")
    return "hello, world"


@server.tool()
def fetch_page(url: str) -> str:
    """Fetch a page; the network is down in this test server."""
    raise ToolError("TypeError: fetch failed")


@server.tool()
def search(query: str) -> str:
    """Search; the API behind it is rate limited, and the server says so in text."""
    raise ToolError("429 Too Many Requests: search API rate limit reached, retry after 30 seconds")


@server.tool()
def explode() -> str:
    """Crash: the SDK answers only "Error executing tool explode"."""
    raise RuntimeError("internal detail that stays on the server")


@server.tool()
def frobnicate() -> str:
    """Fail with a text no shipped rule knows."""
    raise ToolError("the frobnicator is out of phase")


@server.tool()
def big(size: int) -> str:
    """A result of `size` characters (large results: limits, SSE event caps)."""
    return "b" * size


HELPERS: list[subprocess.Popen[bytes]] = []


@server.tool()
def pids() -> dict[str, int]:
    """This server's pid and that of a helper it started (a grandchild of whoever launched it)."""
    if not HELPERS:
        HELPERS.append(subprocess.Popen(["sleep", "600"]))
    return {"server": os.getpid(), "helper": HELPERS[0].pid}


def main() -> None:
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    port = int(sys.argv[2])
    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        json_response="json" in sys.argv[3:],
        stateless_http="stateless" in sys.argv[3:],
    )


if __name__ == "__main__":
    main()
