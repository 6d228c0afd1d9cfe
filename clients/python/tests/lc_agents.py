"""LangChain agents for the tests and the benchmark, run in `.venv/agents-langchain` (whose MCP
SDK is the 1.x langchain-mcp-adapters needs; the project's is 2.x).

`create_agent` (LangChain's agent loop) with LangChain's own `GenericFakeChatModel` fed by
the tasks' scripted mind (tasks.py): the tools server's tools loaded by langchain-mcp-adapters
(behind `mendpoint stdio`, or a gateway's Streamable HTTP URL), or plain tools calling the
orders API through `mendpoint serve`, with and without the adapter
(`mendpoint_agents.langchain`). Run as a script it runs the tasks it is given and prints
their `Run`s as JSON, one a line, for test_agents_langchain.py and bench/agents.py in the
project's venv:

    python lc_agents.py '{"kind": "mcp", "adapter": true, "dir": ..., "tasks": [...]}'
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
from langchain.agents import create_agent
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_mcp_adapters.interceptors import ToolCallInterceptor
from langchain_mcp_adapters.sessions import Connection, create_session
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.errors import GraphRecursionError
from pydantic import Field

from agents_live import Api, stdio_command, stdio_config
from mendpoint_agents import Policy, run_fix_command
from mendpoint_agents.httpx import MendpointAsyncTransport
from mendpoint_agents.langchain import MendpointInterceptor, mendpoint_tool
from tasks import FINAL, Calls, Mind, Run, Task

FRAMEWORK = "langchain"
RECURSION_LIMIT = 25
_ids = itertools.count()


def feedback(message: BaseMessage) -> str | None:
    """The text of a tool result the agent put last in the model's input, or None."""
    if not isinstance(message, ToolMessage):
        return None
    if isinstance(message.content, str):
        return message.content
    parts = [p if isinstance(p, str) else str(p.get("text", "")) for p in message.content]
    return "\n".join(parts)


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's `GenericFakeChatModel`, its messages drawn from the mind: each turn the
    model reads what it was handed last (`inbox`) and the mind says the next message."""

    inbox: list[BaseMessage] = Field(default_factory=list)
    think_s: float = 0.0
    requests: int = 0

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # the scripted mind knows its tool: nothing to bind

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        self.requests += 1
        self.inbox.append(messages[-1])
        await asyncio.sleep(self.think_s)
        return self._generate(messages, *args, **kwargs)


def moves(mind: Mind, inbox: list[BaseMessage]) -> Iterator[AIMessage]:
    while True:
        move = mind.next_move(feedback(inbox[-1]))
        if move == FINAL:
            yield AIMessage(content="done")
            continue
        assert isinstance(move, dict)
        call = {"name": mind.task.tool, "args": move, "id": f"call-{next(_ids)}"}
        yield AIMessage(content="", tool_calls=[call])


async def run(
    tools: list[BaseTool], task: Task, adapter: bool, think_s: float, count: Callable[[], int]
) -> Run:
    mind = Mind(task)
    model = ScriptedChatModel(messages=iter(()), think_s=think_s)
    model.messages = moves(mind, model.inbox)
    agent = create_agent(model, tools)
    before, started = count(), time.monotonic()
    config: RunnableConfig = {"recursion_limit": RECURSION_LIMIT}
    with suppress(GraphRecursionError):
        await agent.ainvoke({"messages": [HumanMessage(task.prompt())]}, config)
    seconds = time.monotonic() - started
    return Run(
        FRAMEWORK,
        adapter,
        task.name,
        task.transport,
        task.failure,
        model.requests,
        count() - before,
        mind.succeeded(),
        seconds,
        mind.read,
    )


@asynccontextmanager
async def mcp_tools(
    connection: Connection, adapter: bool, policy: Policy | None
) -> AsyncIterator[list[BaseTool]]:
    """The server's tools on one session for the tasks run in it (the adapters' default
    opens a session per call; the tools server's rate limit lives in its process)."""
    interceptors: list[ToolCallInterceptor] = [MendpointInterceptor(policy)] if adapter else []
    async with create_session(connection) as session:
        await session.initialize()
        yield await load_mcp_tools(session, tool_interceptors=interceptors)


def http_tools(api: Api, adapter: bool) -> list[BaseTool]:
    """The orders API as three plain tools. Without the adapter a failure is handed to the
    model as LangChain's docs suggest, a `ToolException` with the response's text; with it,
    the transport retries and `mendpoint_tool` turns what is left into the model's text."""

    async def fetch(method: str, path: str, body: Any = None) -> str:
        transport = MendpointAsyncTransport() if adapter else None
        async with httpx.AsyncClient(base_url=api.gateway, transport=transport) as client:
            response = await client.request(method, path, json=body)
        if response.status_code >= 400:
            raise ToolException(response.text)
        return response.text

    async def quota(key: str) -> str:
        """How much of a key's quota is left."""
        return await fetch("GET", f"/quota/{key}")

    async def create_order(qty: int) -> str:
        """Order `qty` notebooks."""
        return await fetch("POST", "/orders", {"qty": qty})

    async def get_item(item: int) -> str:
        """Read an item."""
        return await fetch("GET", f"/items/{item}")

    return [
        StructuredTool.from_function(
            coroutine=mendpoint_tool(f) if adapter else f, handle_tool_error=True
        )
        for f in (quota, create_order, get_item)
    ]


async def main(order: dict[str, Any]) -> list[Run]:
    """Run `order["tasks"]` on one connection: `kind` "mcp" (the tools server behind
    `mendpoint stdio`, started here in `dir`), "mcp-url" (a gateway's MCP `url`) or "http"
    (the orders API behind the gateway of `api`)."""
    tasks = [Task(**task) for task in order["tasks"]]
    adapter, think_s = bool(order["adapter"]), float(order.get("think_s", 0.0))
    policy = Policy(run_fix=run_fix_command) if order.get("run_fix") else None
    if order["kind"] == "http":
        api = Api(order["api"]["direct"], order["api"]["gateway"], Path(order["api"]["token"]))
        tools = http_tools(api, adapter)
        return [await run(tools, t, adapter, think_s, hits_of(api, t.path)) for t in tasks]
    calls = Calls(Path("/nonexistent"))
    if order["kind"] == "mcp-url":
        connection: Connection = {"transport": "streamable_http", "url": order["url"]}
    else:
        directory = Path(order["dir"])
        calls = Calls(directory / f"calls-{adapter}.txt")
        command = stdio_command(stdio_config(directory, order.get("top")), *order.get("args", []))
        token = directory / "tool-token"
        env = {"TOOLS_CALLS_FILE": str(calls.path), "TOOLS_TOKEN_FILE": str(token)}
        connection = {"transport": "stdio", "command": command[0], "args": command[1:], "env": env}
    async with mcp_tools(connection, adapter, policy) as tools:
        return [await run(tools, t, adapter, think_s, calls_of(calls, t.tool)) for t in tasks]


def hits_of(api: Api, path: str) -> Callable[[], int]:
    return lambda: api.hits().get(path, 0)


def calls_of(calls: Calls, tool: str) -> Callable[[], int]:
    return lambda: calls.of(tool)


if __name__ == "__main__":
    for done in asyncio.run(main(json.loads(sys.argv[1]))):
        print(json.dumps(done.to_json()), flush=True)
