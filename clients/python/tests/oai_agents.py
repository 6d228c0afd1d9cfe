"""OpenAI Agents SDK agents for the tests and the benchmark: the SDK's own `ScriptedModel`
(`agents.testing`) answering with the tasks' scripted mind (tasks.py), the tools server
behind `mendpoint stdio` as an MCP server, or plain function tools calling the orders API
through `mendpoint serve`, with and without the adapter (`mendpoint_agents.openai_agents`)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
from agents import Agent, FunctionTool, MaxTurnsExceeded, RunConfig, Runner, function_tool
from agents.mcp import MCPServer, MCPServerStdio
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from agents_live import Api, stdio_command, stdio_config
from mendpoint_agents import Policy
from mendpoint_agents.httpx import MendpointAsyncTransport
from mendpoint_agents.openai_agents import MendpointMCPServerStdio, mendpoint_failure_error
from tasks import FINAL, Calls, Mind, Run, Task

FRAMEWORK = "openai-agents"
MAX_TURNS = 12
QUIET = RunConfig(tracing_disabled=True)  # nothing to export traces to
_ids = itertools.count()


def last_output(call: ModelCall) -> str | None:
    """The text of the last tool output the SDK put in the model's input, or None."""
    items = call.input if isinstance(call.input, list) else []
    for item in reversed(items):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                return "\n".join(str(part.get("text", "")) for part in output)
            return str(output)
    return None


def scripted(mind: Mind, think_s: float) -> ScriptedModel:
    """The SDK's scripted model, one responder step per turn the run may take."""

    async def respond(call: ModelCall) -> Any:
        await asyncio.sleep(think_s)
        move = mind.next_move(last_output(call))
        if move == FINAL:
            return [assistant_message("done")]
        assert isinstance(move, dict)
        return [function_call(mind.task.tool, move, call_id=f"call-{next(_ids)}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(MAX_TURNS)])


async def run(
    agent_for: Callable[[ScriptedModel], Agent[Any]],
    task: Task,
    adapter: bool,
    think_s: float,
    count: Callable[[], int],
) -> Run:
    mind = Mind(task)
    model = scripted(mind, think_s)
    before, started = count(), time.monotonic()
    with suppress(MaxTurnsExceeded):
        await Runner.run(agent_for(model), task.prompt(), max_turns=MAX_TURNS, run_config=QUIET)
    return Run(
        FRAMEWORK,
        adapter,
        task.name,
        task.transport,
        task.failure,
        len(model.calls),
        count() - before,
        mind.succeeded(),
        time.monotonic() - started,
        mind.read,
    )


@asynccontextmanager
async def mcp_server(
    directory: Path, adapter: bool, policy: Policy | None = None
) -> AsyncIterator[tuple[MCPServerStdio, Calls]]:
    """The tools server behind `mendpoint stdio`, connected once for the tasks run in it."""
    calls = Calls(directory / f"calls-{adapter}.txt")
    command = stdio_command(stdio_config(directory))
    env = {"TOOLS_CALLS_FILE": str(calls.path), "TOOLS_TOKEN_FILE": str(directory / "tool-token")}
    params: Any = {"command": command[0], "args": command[1:], "env": env}
    server: MCPServerStdio = (
        MendpointMCPServerStdio(params, policy=policy, client_session_timeout_seconds=30)
        if adapter
        else MCPServerStdio(params, client_session_timeout_seconds=30)
    )
    async with server:
        yield server, calls


async def run_mcp(
    server: MCPServer, calls: Calls, task: Task, adapter: bool, think_s: float = 0.0
) -> Run:
    return await run(
        lambda model: Agent(name="agent", model=model, mcp_servers=[server]),
        task,
        adapter,
        think_s,
        lambda: calls.of(task.tool),
    )


def http_tools(api: Api, adapter: bool) -> list[FunctionTool]:
    """The orders API as three function tools. Without the adapter a failure raises
    (`raise_for_status`) and the SDK's default error function answers the model; with it,
    the transport retries and `mendpoint_failure_error` says what is left."""

    async def fetch(method: str, path: str, body: Any = None) -> str:
        transport = MendpointAsyncTransport() if adapter else None
        async with httpx.AsyncClient(base_url=api.gateway, transport=transport) as client:
            response = await client.request(method, path, json=body)
        response.raise_for_status()
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

    error = mendpoint_failure_error if adapter else None
    extra: dict[str, Any] = {} if error is None else {"failure_error_function": error}
    return [function_tool(f, **extra) for f in (quota, create_order, get_item)]


async def run_http(api: Api, task: Task, adapter: bool, think_s: float = 0.0) -> Run:
    tools = http_tools(api, adapter)
    return await run(
        lambda model: Agent(name="agent", model=model, tools=list(tools)),
        task,
        adapter,
        think_s,
        lambda: api.hits().get(task.path, 0),
    )
