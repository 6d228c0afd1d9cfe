"""The fast MCP server the MCP rows run against: one tool, half of its calls failing.

Two transports over the same logic, so every system sees the same server:

- Streamable HTTP (`--port`): aiohttp on uvloop, answers in JSON-response mode
  (`application/json`, never an event stream); `initialize` names a session in
  `Mcp-Session-Id` and every later request must carry a known one (else 404).
- stdio (`--stdio`): newline-delimited JSON-RPC on stdin/stdout, a plain blocking loop, for
  the bridge and mcp-proxy, which run a stdio server themselves.

The tool is `read_file`, like @modelcontextprotocol/server-filesystem's: a path under
`/srv/notes/note-N.txt` returns a short note; any other path fails with the Node ENOENT text
that server sends, which the shipped `builtin:mcp-defaults` pack classifies (FILE_NOT_FOUND).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import sys
from typing import Any

from aiohttp import web

PATH = "/mcp"
TOOL = "read_file"
PROTOCOL_VERSION = "2025-11-25"
NOTE = re.compile(r"^/srv/notes/note-(\d+)\.txt$")
SESSIONS = web.AppKey("sessions", set[str])
TOOLS = [
    {
        "name": TOOL,
        "description": "Read the complete contents of a text file under /srv/notes.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


def ok_path(n: int) -> str:
    return f"/srv/notes/note-{n}.txt"


def missing_path(n: int) -> str:
    return f"/srv/notes/missing-{n}.txt"


def enoent(path: str) -> str:
    """What the filesystem server says for a file that is not there."""
    return f"ENOENT: no such file or directory, open '{path}'"


def call_tool(params: Any) -> dict[str, Any]:
    """The `CallToolResult` of one call: a note, or a tool error (`isError: true`)."""
    params = params if isinstance(params, dict) else {}
    arguments = params.get("arguments")
    path = arguments.get("path") if isinstance(arguments, dict) else None
    if params.get("name") != TOOL or not isinstance(path, str):
        text = f"Tool {params.get('name')} not found"
        return {"content": [{"type": "text", "text": text}], "isError": True}
    found = NOTE.match(path)
    if found is None:
        return {"content": [{"type": "text", "text": enoent(path)}], "isError": True}
    note = f"Note {found[1]}: call the supplier before Friday about the delayed pallets."
    return {"content": [{"type": "text", "text": note}]}


def answer(message: Any) -> dict[str, Any] | None:
    """The response to one JSON-RPC message; None for notifications and responses."""
    if not isinstance(message, dict) or "id" not in message or "method" not in message:
        return None
    method, params, rid = message["method"], message.get("params") or {}, message["id"]
    result: dict[str, Any]
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", PROTOCOL_VERSION),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "mendpoint-bench", "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        result = call_tool(params)
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        return {"jsonrpc": "2.0", "id": rid, "error": error}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


async def handle(request: web.Request) -> web.StreamResponse:
    sessions = request.app[SESSIONS]
    session = request.headers.get("Mcp-Session-Id")
    if request.method == "DELETE":
        sessions.discard(session or "")
        return web.Response(status=200)
    if request.method != "POST":
        return web.Response(status=405, headers={"Allow": "POST, DELETE"})
    try:
        message = json.loads(await request.read())
    except ValueError:
        return web.Response(status=400, text="not JSON")
    headers = {}
    if isinstance(message, dict) and message.get("method") == "initialize":
        session = secrets.token_hex(16)
        sessions.add(session)
        headers["Mcp-Session-Id"] = session
    elif session not in sessions:
        return web.Response(status=404, text="Session not found")
    reply = answer(message)
    if reply is None:
        return web.Response(status=202, headers=headers)
    return web.Response(body=dump(reply), content_type="application/json", headers=headers)


def serve_http(port: int) -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    app = web.Application()
    app[SESSIONS] = set()
    app.router.add_route("*", PATH, handle)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def serve_stdio() -> None:
    """One message a line in, one response a line out, flushed each time."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        reply = answer(message)
        if reply is not None:
            out.write(dump(reply) + b"\n")
            out.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--port", type=int, help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    group.add_argument("--stdio", action="store_true", help="serve on stdin/stdout")
    args = parser.parse_args()
    if args.stdio:
        serve_stdio()
    else:
        serve_http(args.port)


if __name__ == "__main__":
    main()
