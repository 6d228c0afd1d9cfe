"""An MCP server written with the official Python SDK, for the gateway's tests.

`python sdk_server.py stdio` serves on stdin/stdout; `python sdk_server.py http PORT [json]
[stateless] [resumable]` serves Streamable HTTP on 127.0.0.1:PORT/mcp (`resumable`: with an
in-memory event store, so a client may resume a stream with `Last-Event-ID`). Its tools fail
the way real tools do: by raising, which the SDK turns into a result with `isError: true`.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import uvicorn
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCMessage, ToolAnnotations

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


UNAVAILABLE = "the report API answered HTTP 503 Service Unavailable"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_report(day: str) -> str:
    """Read a day's report (read-only); the API behind it is failing."""
    raise ToolError(UNAVAILABLE)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, idempotentHint=True))
def store_report(day: str, text: str) -> str:
    """Store a day's report, replacing it (idempotent); the API behind it is failing."""
    raise ToolError(UNAVAILABLE)


@server.tool()
def send_report(day: str) -> str:
    """Send a day's report by mail (no annotations: may have side effects); the API fails."""
    raise ToolError(UNAVAILABLE)


@server.tool()
def query_db(sql: str) -> str:
    """Run a query; like some real servers, it reports a database error as a success."""
    if sql.strip().lower().startswith("select 1"):
        return "1"
    return "Database error: no such table: widgets"


@server.tool()
def explode() -> str:
    """Crash: the SDK answers only "Error executing tool explode"."""
    raise RuntimeError("internal detail that stays on the server")


@server.tool()
def frobnicate() -> str:
    """Fail with a text no shipped rule knows."""
    raise ToolError("the frobnicator is out of phase")


@server.tool()
async def read_note_slowly(name: str, ctx: Context) -> str:
    """read_note, logging a line first: its stream has an event before the answer."""
    await ctx.info(f"looking for {name}")
    return read_note(name)


@server.tool()
def convert(operation: str, value: float) -> float:
    """Convert a value; the one operation it knows is km_to_m."""
    if operation != "km_to_m":
        raise ToolError(f"Unsupported operation: {operation}")
    return value * 1000


@server.tool()
def note_by_id(note_id: str) -> str:
    """A note by its id; like many servers, it passes a lookup's exception text on."""
    notes = {"n-1": "hello"}
    try:
        return notes[note_id]
    except KeyError as exc:
        raise ToolError(str(exc)) from exc


@server.tool()
def square_root(number: str) -> float:
    """The square root of a number; math's own error is passed on."""
    try:
        return math.sqrt(float(number))
    except ValueError as exc:
        raise ToolError(str(exc)) from exc


REFUSED = "401 Client Error: Unauthorized for url: http://127.0.0.1:9/issues"


@server.tool()
def list_issues(repo: str) -> str:
    """A repository's issues, with the server's own API token, which the API refuses."""
    raise ToolError(REFUSED)


@server.tool()
def list_issues_as(repo: str, api_key: str) -> str:
    """The same with the caller's API key, which the API refuses."""
    raise ToolError(REFUSED)


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


class MemoryEvents(EventStore):
    """Every event of every stream, numbered in order, for replays after `Last-Event-ID`."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        index = next((i for i, e in enumerate(self.events) if e[0] == last_event_id), None)
        if index is None:
            return None
        stream = self.events[index][1]
        for event_id, stream_id, message in self.events[index + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def main() -> None:
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    port = int(sys.argv[2])
    if "resumable" in sys.argv[3:]:
        app = server.streamable_http_app(event_store=MemoryEvents())
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
        return
    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        json_response="json" in sys.argv[3:],
        stateless_http="stateless" in sys.argv[3:],
    )


if __name__ == "__main__":
    main()
