"""The OpenAI Agents SDK adapter on the real SDK: its own `ScriptedModel` (no LLM) with the
tools server behind `mendpoint stdio` and the orders API behind `mendpoint serve`."""

from __future__ import annotations

from pathlib import Path

from agents_live import Api, tools_behind_gateway
from mendpoint_agents import Policy, run_fix_command
from mendpoint_agents.openai_agents import MendpointMCPServerStreamableHttp
from oai_agents import mcp_server, run_http, run_mcp
from tasks import Calls, Task, tasks

NO_CALLS = Calls(Path("/nonexistent"))  # the server's calls are not counted over HTTP


def by_class(transport: str) -> dict[str, Task]:
    return {task.failure: task for task in tasks(transport)}  # type: ignore[arg-type]


async def test_mcp_failures_cost_what_their_class_says(tmp_path: Path) -> None:
    mcp = by_class("mcp")
    applied = Task("send", "mcp", "terminal", "send_report", {"day": "mon"})
    async with mcp_server(tmp_path, adapter=True) as (server, calls):
        transient = await run_mcp(server, calls, mcp["transient"], adapter=True)
        correctable = await run_mcp(server, calls, mcp["correctable"], adapter=True)
        terminal = await run_mcp(server, calls, mcp["terminal"], adapter=True)
        sent = await run_mcp(server, calls, applied, adapter=True)
    assert (transient.succeeded, transient.model_requests, transient.tool_calls) == (True, 2, 2)
    assert transient.seconds >= 0.2
    assert correctable.succeeded and correctable.model_requests == 3
    assert "Fix required: Use a path that exists" in correctable.read[0]
    for run in (terminal, sent):
        assert (run.succeeded, run.model_requests, run.tool_calls) == (False, 2, 1)
        assert "do not call again" in run.read[0]


async def test_a_streamable_http_server_behind_mendpoint_serve(tmp_path: Path) -> None:
    """The same ladder on `MendpointMCPServerStreamableHttp`, through a `type: mcp` route."""
    mcp = by_class("mcp")
    with tools_behind_gateway(tmp_path) as url:
        server = MendpointMCPServerStreamableHttp({"url": url}, client_session_timeout_seconds=30)
        async with server:
            transient = await run_mcp(server, NO_CALLS, mcp["transient"], adapter=True)
            terminal = await run_mcp(server, NO_CALLS, mcp["terminal"], adapter=True)
    assert (transient.succeeded, transient.model_requests) == (True, 2)
    assert transient.read == [f"3 notes match {mcp['transient'].arguments['query']!r}"]
    assert terminal.model_requests == 2 and "do not call again" in terminal.read[0]


async def test_without_the_adapter_the_model_reads_prose_and_retries(tmp_path: Path) -> None:
    """The SDK hands the tool's text to the model; the scripted model, told nothing it can
    act on, calls the terminal tool again until it gives up."""
    terminal = by_class("mcp")["terminal"]
    async with mcp_server(tmp_path, adapter=False) as (server, calls):
        run = await run_mcp(server, calls, terminal, adapter=False)
    assert run.tool_calls == 4 and not run.succeeded


async def test_a_fix_command_runs_for_a_caller_who_opted_in(tmp_path: Path) -> None:
    whoami = Task("whoami", "mcp", "correctable", "whoami", {})
    policy = Policy(run_fix=run_fix_command)
    async with mcp_server(tmp_path, adapter=True, policy=policy) as (server, calls):
        run = await run_mcp(server, calls, whoami, adapter=True)
    assert run.read == ["you are agent 7"]
    assert (run.model_requests, run.tool_calls) == (2, 2)


async def test_function_tools_calling_http_through_the_gateway(api: Api) -> None:
    http = by_class("http")
    transient = await run_http(api, http["transient"], adapter=True)
    correctable = await run_http(api, http["correctable"], adapter=True)
    terminal = await run_http(api, http["terminal"], adapter=True)
    assert (transient.succeeded, transient.model_requests, transient.tool_calls) == (True, 2, 2)
    assert correctable.succeeded and correctable.model_requests == 3
    assert "Fix required: Correct the request" in correctable.read[0]
    assert (terminal.model_requests, terminal.tool_calls) == (2, 1)
    assert "do not call again" in terminal.read[0]
