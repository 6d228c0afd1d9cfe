"""An MCP server (official Python SDK) that talks back: progress, sampling, elicitation, roots.

`python conversation_server.py stdio` serves on stdin/stdout; `python conversation_server.py
http PORT` serves Streamable HTTP on 127.0.0.1:PORT/mcp, the same server going direct. Its
tools send what a server sends while a call runs, so a test can see which stream each message
takes: `count` reports progress with its call's tag in every message, `ask_model` asks the
client to sample, `ask_user` elicits, `roots` lists the client's roots, `grow` announces a
changed tool list, `wait` sleeps (a call to cancel) and `quit` exits the process mid-call.
"""

from __future__ import annotations

import os
import sys
import warnings

import anyio
from mcp import types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel

warnings.simplefilter("ignore")  # sampling, roots and logging are deprecated in 2026-07-28

server = MCPServer("mendpoint-conversation-server")


@server.tool()
async def count(tag: str, steps: int, ctx: Context) -> str:
    """Report `steps` progress notifications, each naming `tag`, then answer `tag`."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"{tag} {step}")
        await anyio.sleep(0.002)
    return tag


@server.tool()
async def ask_model(question: str, ctx: Context) -> str:
    """Ask the client's model (`sampling/createMessage`) and answer with what it said."""
    message = types.SamplingMessage(
        role="user", content=types.TextContent(type="text", text=question)
    )
    result = await ctx.session.create_message(
        [message], max_tokens=16, related_request_id=ctx.request_id
    )
    content = result.content
    return content.text if isinstance(content, types.TextContent) else repr(content)


class Name(BaseModel):
    name: str


@server.tool()
async def ask_user(ctx: Context) -> str:
    """Ask the user for a name (`elicitation/create`) and answer with it."""
    answer = await ctx.elicit("Your name?", Name)
    return answer.data.name if answer.action == "accept" else answer.action


@server.tool()
async def roots(ctx: Context) -> list[str]:
    """The client's roots (`roots/list`)."""
    listed = await ctx.session.list_roots()
    return [str(root.uri) for root in listed.roots]


@server.tool()
async def grow(ctx: Context) -> str:
    """Announce that the tool list changed (a notification about the session, not the call)."""
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
async def wait(seconds: float) -> str:
    """Sleep, then answer: a call to cancel."""
    await anyio.sleep(seconds)
    return "waited"


@server.tool()
def quit() -> str:
    """Exit the process at once, mid-call."""
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))


if __name__ == "__main__":
    main()
