"""The MCP server behind the agents' tests and benchmark: one tool per failure class.

`python tools_server.py stdio` serves on stdin/stdout, `python tools_server.py http PORT` on
127.0.0.1:PORT/mcp. Written with the official Python SDK; its tools fail the way real tools
do, by raising, which the SDK turns into results with `isError: true` for the gateway to
upgrade (`builtin:mcp-defaults` classifies each text):

    search      transient: a new query is rate limited for 200 ms ("retry in 200ms"): a call
                sooner fails again, one after the advised delay succeeds
    read_note   caller-correctable: only the note "hello" exists (ENOENT otherwise)
    frobnicate  terminal: a failure no rule knows
    send_report terminal, possibly applied: the API behind it answered 503 (a mail may be out)
    lookup      transient, as `search`, but answered with a JSON-RPC error (an `MCPError`
                raised in the tool) instead of an `isError` result
    whoami      correctable with a command: fails while $TOOLS_TOKEN_FILE does not exist
                (the tests' config adds the rule and its `fix_command`, which creates it)

Every call is appended to $TOOLS_CALLS_FILE (one tool name a line) when it is set, so a test
counts what reached the server.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

server = MCPServer("mendpoint-agents-tools")
_limited_until: dict[str, float] = {}
LIMIT_S = 0.2


def _called(tool: str) -> None:
    calls = os.environ.get("TOOLS_CALLS_FILE")
    if calls:
        with Path(calls).open("a") as out:
            out.write(tool + "\n")


@server.tool()
def search(query: str) -> str:
    """Search the notes; the search API behind it limits the rate of new queries."""
    _called("search")
    until = _limited_until.setdefault(query, time.monotonic() + LIMIT_S)
    if time.monotonic() < until:
        raise ToolError("429 Too Many Requests: search rate limit reached, retry in 200ms")
    return f"3 notes match {query!r}"


@server.tool()
def lookup(key: str) -> str:
    """Look a key up; the API behind it limits the rate of new keys."""
    _called("lookup")
    until = _limited_until.setdefault(f"lookup:{key}", time.monotonic() + LIMIT_S)
    if time.monotonic() < until:
        raise MCPError(-32000, "429 Too Many Requests: lookup rate limit reached, retry in 200ms")
    return f"3 notes match {key!r}"


@server.tool()
def read_note(name: str) -> str:
    """Read a note by name."""
    _called("read_note")
    if name != "hello":
        raise ToolError(f"ENOENT: no such file or directory, open '{name}'")
    return "hello, world"


@server.tool()
def frobnicate() -> str:
    """Frobnicate the notes."""
    _called("frobnicate")
    raise ToolError("the frobnicator is out of phase")


@server.tool()
def send_report(day: str) -> str:
    """Send a day's report by mail."""
    _called("send_report")
    raise ToolError("the mail API answered HTTP 503 Service Unavailable")


@server.tool()
def whoami() -> str:
    """Who the server's credentials belong to."""
    _called("whoami")
    if not Path(os.environ.get("TOOLS_TOKEN_FILE", "/nonexistent")).exists():
        raise ToolError("401 Unauthorized: the API token has expired")
    return "you are agent 7"


def main() -> None:
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))


if __name__ == "__main__":
    main()
