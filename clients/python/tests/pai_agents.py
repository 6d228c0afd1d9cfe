"""pydantic-ai agents for the tests and the benchmark: a `FunctionModel` driven by the tasks'
scripted mind (tasks.py), with the gateway's tools over MCP (`MCPToolset` on `mendpoint
stdio`) or plain tools calling the orders API through `mendpoint serve`, with and without
the adapter (`mendpoint_agents.pydantic_ai`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, ModelRetry, Tool, UnexpectedModelBehavior
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agents_live import Api, stdio_command, stdio_config
from mendpoint_agents import Policy
from mendpoint_agents.httpx import MendpointAsyncTransport
from mendpoint_agents.pydantic_ai import mendpoint_tool, mendpoint_tool_calls
from tasks import FINAL, Calls, Mind, Run, Task

FRAMEWORK = "pydantic-ai"


def scripted(mind: Mind, think_s: float, counter: list[int]) -> FunctionModel:
    """A model that does what the mind says with what pydantic-ai hands it."""

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        counter[0] += 1
        await asyncio.sleep(think_s)
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            move = mind.next_move(last.model_response_str(), last.outcome == "failed")
        elif isinstance(last, RetryPromptPart):
            move = mind.next_move(last.model_response())
        else:
            move = mind.next_move(None)
        if move == FINAL:
            return ModelResponse(parts=[TextPart("done")])
        assert isinstance(move, dict)
        return ModelResponse(parts=[ToolCallPart(mind.task.tool, move)])

    return FunctionModel(respond)


async def run(
    agent_for: Callable[[FunctionModel], Agent[None, str]],
    task: Task,
    adapter: bool,
    think_s: float,
    count: Callable[[], int],
) -> Run:
    mind, requests = Mind(task), [0]
    agent = agent_for(scripted(mind, think_s, requests))
    before, started = count(), time.monotonic()
    with contextlib.suppress(UnexpectedModelBehavior):  # the tool's retries ran out
        await agent.run(task.prompt())
    seconds = time.monotonic() - started
    return Run(
        FRAMEWORK,
        adapter,
        task.name,
        task.transport,
        task.failure,
        requests[0],
        count() - before,
        mind.succeeded(),
        seconds,
        mind.read,
    )


@asynccontextmanager
async def mcp_toolset(
    directory: Path, adapter: bool, policy: Policy | None = None, *gateway_args: str
) -> AsyncIterator[tuple[MCPToolset[None], Calls]]:
    """The tools server behind `mendpoint stdio`, connected once for the tasks run in it."""
    calls = Calls(directory / f"calls-{adapter}.txt")
    command = stdio_command(stdio_config(directory), *gateway_args)
    env = {"TOOLS_CALLS_FILE": str(calls.path), "TOOLS_TOKEN_FILE": str(directory / "tool-token")}
    transport = StdioTransport(command=command[0], args=command[1:], env=env)
    hook = mendpoint_tool_calls(policy) if adapter else None
    toolset: MCPToolset[None] = MCPToolset(transport, process_tool_call=hook)
    async with toolset:
        yield toolset, calls


async def run_mcp(
    toolset: MCPToolset[None], calls: Calls, task: Task, adapter: bool, think_s: float = 0.0
) -> Run:
    return await run(
        lambda model: Agent(model, toolsets=[toolset]),
        task,
        adapter,
        think_s,
        lambda: calls.of(task.tool),
    )


def http_tools(api: Api, adapter: bool) -> list[Tool[None]]:
    """The orders API as three plain tools. Without the adapter a failure is handed to the
    model as pydantic-ai's docs suggest, a `ModelRetry` with the response's text; with it,
    the transport retries and `mendpoint_tool` turns what is left into the model's outcome."""

    async def fetch(method: str, path: str, body: Any = None) -> str:
        transport = MendpointAsyncTransport() if adapter else None
        async with httpx.AsyncClient(base_url=api.gateway, transport=transport) as client:
            response = await client.request(method, path, json=body)
        if response.status_code >= 400:
            raise ModelRetry(response.text)
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

    functions: list[Callable[..., Awaitable[str]]] = [quota, create_order, get_item]
    wrapped = [mendpoint_tool(f) if adapter else f for f in functions]
    return [Tool(f, takes_ctx=False) for f in wrapped]


def api_hits(api: Api, task: Task) -> Callable[[], int]:
    return lambda: api.hits().get(task.path, 0)


async def run_http(api: Api, task: Task, adapter: bool, think_s: float = 0.0) -> Run:
    tools = http_tools(api, adapter)
    return await run(
        lambda model: Agent(model, tools=tools), task, adapter, think_s, api_hits(api, task)
    )
