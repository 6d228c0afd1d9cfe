"""The pydantic-ai adapter on the real framework: `FunctionModel` agents (no LLM) with the
tools server behind `mendpoint stdio` and the orders API behind `mendpoint serve`."""

from __future__ import annotations

from pathlib import Path

from agents_live import Api
from mendpoint_agents import Policy, run_fix_command
from pai_agents import mcp_toolset, run_http, run_mcp
from tasks import Task, tasks


def by_class(transport: str) -> dict[str, Task]:
    return {task.failure: task for task in tasks(transport)}  # type: ignore[arg-type]


async def test_mcp_failures_cost_what_their_class_says(tmp_path: Path) -> None:
    mcp = by_class("mcp")
    async with mcp_toolset(tmp_path, adapter=True) as (toolset, calls):
        transient = await run_mcp(toolset, calls, mcp["transient"], adapter=True)
        correctable = await run_mcp(toolset, calls, mcp["correctable"], adapter=True)
        terminal = await run_mcp(toolset, calls, mcp["terminal"], adapter=True)
        applied = await run_mcp(
            toolset, calls, Task("send", "mcp", "terminal", "send_report", {"day": "mon"}), True
        )
    # Transient: retried in the hook after the advised 200 ms; the model saw only the success.
    assert (transient.succeeded, transient.model_requests, transient.tool_calls) == (True, 2, 2)
    assert transient.seconds >= 0.2
    # Correctable: one retry prompt carrying fix_required; the model fixed the call.
    assert correctable.succeeded and correctable.model_requests == 3
    assert "Fix required: Use a path that exists" in correctable.read[0]
    # Terminal, and a call that may have taken effect: one call, one model request after it.
    for run in (terminal, applied):
        assert (run.succeeded, run.model_requests, run.tool_calls) == (False, 2, 1)
        assert "do not call again" in run.read[0]


async def test_without_the_adapter_the_framework_spends_retries(tmp_path: Path) -> None:
    """The same terminal task without the hook: pydantic-ai's ModelRetry asks the model to
    try again, and the scripted model does, until the tool's retries run out."""
    terminal = by_class("mcp")["terminal"]
    async with mcp_toolset(tmp_path, adapter=False) as (toolset, calls):
        run = await run_mcp(toolset, calls, terminal, adapter=False)
    assert run.tool_calls == 2 and run.model_requests == 2  # the retry budget (1) spent
    assert not run.succeeded


async def test_with_nothing_from_the_gateway_the_framework_decides(tmp_path: Path) -> None:
    """`--mode original`: the failure carries no fields, and the hook leaves pydantic-ai's
    own ModelRetry as it was (the retry is spent as without the adapter)."""
    terminal = by_class("mcp")["terminal"]
    async with mcp_toolset(tmp_path, True, None, "--mode", "original") as (toolset, calls):
        run = await run_mcp(toolset, calls, terminal, adapter=True)
    assert run.tool_calls == 2 and "mendpoint_failure" not in run.read[0]


async def test_a_fix_command_runs_for_a_caller_who_opted_in(tmp_path: Path) -> None:
    whoami = Task("whoami", "mcp", "correctable", "whoami", {})
    policy = Policy(run_fix=run_fix_command)
    async with mcp_toolset(tmp_path, adapter=True, policy=policy) as (toolset, calls):
        run = await run_mcp(toolset, calls, whoami, adapter=True)
    assert (tmp_path / "tool-token").exists()
    assert run.read == ["you are agent 7"]
    assert (run.model_requests, run.tool_calls) == (2, 2)


async def test_plain_tools_calling_http_through_the_gateway(api: Api) -> None:
    http = by_class("http")
    transient = await run_http(api, http["transient"], adapter=True)
    correctable = await run_http(api, http["correctable"], adapter=True)
    terminal = await run_http(api, http["terminal"], adapter=True)
    assert (transient.succeeded, transient.model_requests, transient.tool_calls) == (True, 2, 2)
    assert correctable.succeeded and correctable.model_requests == 3
    assert "Fix required: Correct the request" in correctable.read[0]
    assert (terminal.model_requests, terminal.tool_calls) == (2, 1)
