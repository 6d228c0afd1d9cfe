"""The LangChain adapter on the real framework: `create_agent` with LangChain's own
`GenericFakeChatModel` (no LLM), langchain-mcp-adapters' tools on the tools server behind
`mendpoint stdio` and behind `mendpoint serve`, and plain tools on the orders API.

langchain-mcp-adapters 0.3 needs the 1.x MCP SDK and this venv has 2.x, so the agents run in
`.venv/agents-langchain` (`make agents-langchain`, which `make test` runs; pinned by
requirements/agents-langchain.lock): each test hands lc_agents.py its tasks and asserts on
the `Run`s it prints."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agents_live import REPO, Api, tools_behind_gateway
from tasks import Run, Task, tasks

LC_PYTHON = REPO / ".venv" / "agents-langchain" / "bin" / "python"
LC_AGENTS = Path(__file__).resolve().parent / "lc_agents.py"
pytestmark = pytest.mark.skipif(
    not LC_PYTHON.exists(),
    reason="no .venv/agents-langchain (LangChain's MCP adapters need the 1.x MCP SDK): "
    "`make agents-langchain` creates it, and `make test` does",
)


def lc_agents(order: dict[str, Any], *run_tasks: Task) -> subprocess.CompletedProcess[str]:
    """lc_agents.py in the LangChain venv, running `run_tasks` as `order` says."""
    order = {**order, "tasks": [dataclasses.asdict(task) for task in run_tasks]}
    return subprocess.run(
        [str(LC_PYTHON), str(LC_AGENTS), json.dumps(order)],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=REPO,
        check=False,
    )


def lc_runs(order: dict[str, Any], *run_tasks: Task) -> list[Run]:
    """The tasks run by LangChain agents in their venv, one `Run` each."""
    done = lc_agents(order, *run_tasks)
    assert done.returncode == 0, done.stderr[-4000:]
    return [Run(**json.loads(line)) for line in done.stdout.splitlines()]


def by_class(transport: str) -> dict[str, Task]:
    return {task.failure: task for task in tasks(transport)}  # type: ignore[arg-type]


def test_mcp_failures_cost_what_their_class_says(tmp_path: Path) -> None:
    mcp = by_class("mcp")
    applied = Task("send", "mcp", "terminal", "send_report", {"day": "mon"})
    order = {"kind": "mcp", "adapter": True, "dir": str(tmp_path)}
    transient, correctable, terminal, sent = lc_runs(
        order, mcp["transient"], mcp["correctable"], mcp["terminal"], applied
    )
    # Transient: called again in the interceptor after the advised 200 ms; the model saw
    # only the success.
    assert (transient.succeeded, transient.model_requests, transient.tool_calls) == (True, 2, 2)
    assert transient.seconds >= 0.2
    assert transient.read == [f"3 notes match {mcp['transient'].arguments['query']!r}"]
    # Correctable: the tool's error carries fix_required; the model fixed the call.
    assert correctable.succeeded and correctable.model_requests == 3
    assert "Fix required: Use a path that exists" in correctable.read[0]
    assert correctable.read[0].startswith("FILE_NOT_FOUND: ")
    # Terminal, and a call that may have taken effect (503 quoted): one call, never retried.
    for run in (terminal, sent):
        assert (run.succeeded, run.model_requests, run.tool_calls) == (False, 2, 1)
        assert "do not call again" in run.read[0]


def test_a_streamable_http_server_behind_mendpoint_serve(tmp_path: Path) -> None:
    """The same interceptor on a `streamable_http` connection through a `type: mcp` route."""
    mcp = by_class("mcp")
    with tools_behind_gateway(tmp_path) as url:
        order = {"kind": "mcp-url", "adapter": True, "url": url}
        transient, terminal = lc_runs(order, mcp["transient"], mcp["terminal"])
    assert (transient.succeeded, transient.model_requests) == (True, 2)
    assert transient.seconds >= 0.2
    assert transient.read == [f"3 notes match {mcp['transient'].arguments['query']!r}"]
    assert terminal.model_requests == 2 and "do not call again" in terminal.read[0]


def test_without_the_adapter_the_model_reads_prose_and_retries(tmp_path: Path) -> None:
    """langchain-mcp-adapters hands the error's text to the model; the scripted model, told
    nothing it acts on, calls the terminal and the transient tool again at once, until it
    gives up (the rate limit is not waited out)."""
    mcp = by_class("mcp")
    order = {"kind": "mcp", "adapter": False, "dir": str(tmp_path)}
    transient, terminal = lc_runs(order, mcp["transient"], mcp["terminal"])
    assert (terminal.tool_calls, terminal.model_requests, terminal.succeeded) == (4, 5, False)
    assert '"mendpoint_failure"' in terminal.read[0]  # the raw item, as prose
    assert transient.tool_calls == 4 and not transient.succeeded


def test_a_jsonrpc_error_is_followed_instead_of_ending_the_run(tmp_path: Path) -> None:
    """A tool answered with a JSON-RPC error (rate limited): langchain-mcp-adapters raises it
    out of the tool and the agent's run ends with it; the interceptor reads the gateway's
    `error.data["mendpoint/failure"]` and calls again after the advised delay."""
    lookup = Task("lookup", "mcp", "transient", "lookup", {"key": "k1"})
    without = lc_agents({"kind": "mcp", "adapter": False, "dir": str(tmp_path)}, lookup)
    assert without.returncode != 0
    assert "McpError: 429 Too Many Requests: lookup rate limit" in without.stderr
    (run,) = lc_runs({"kind": "mcp", "adapter": True, "dir": str(tmp_path)}, lookup)
    assert (run.succeeded, run.model_requests, run.tool_calls) == (True, 2, 2)
    assert run.seconds >= 0.2 and run.read == ["3 notes match 'k1'"]


def test_with_nothing_from_the_gateway_the_framework_decides(tmp_path: Path) -> None:
    """`--mode original`: no fields, so the interceptor returns the result as it came and
    the framework's own error text reaches the model (and the model retries as without)."""
    terminal = by_class("mcp")["terminal"]
    order = {"kind": "mcp", "adapter": True, "dir": str(tmp_path), "args": ["--mode", "original"]}
    (run,) = lc_runs(order, terminal)
    assert run.tool_calls == 4
    assert run.read[0] == "Error executing tool frobnicate: the frobnicator is out of phase"


def test_a_fix_command_runs_for_a_caller_who_opted_in(tmp_path: Path) -> None:
    whoami = Task("whoami", "mcp", "correctable", "whoami", {})
    refused = lc_runs({"kind": "mcp", "adapter": True, "dir": str(tmp_path)}, whoami)[0]
    assert not (tmp_path / "tool-token").exists()
    assert f"Fix command: touch {tmp_path / 'tool-token'}" in refused.read[0]
    order = {"kind": "mcp", "adapter": True, "dir": str(tmp_path), "run_fix": True}
    (run,) = lc_runs(order, whoami)
    assert (tmp_path / "tool-token").exists()
    assert run.read == ["you are agent 7"]
    assert (run.model_requests, run.tool_calls) == (2, 2)


def test_plain_tools_calling_http_through_the_gateway(api: Api) -> None:
    http = by_class("http")
    order = {
        "kind": "http",
        "adapter": True,
        "api": {"direct": api.direct, "gateway": api.gateway, "token": str(api.token_file)},
    }
    transient, correctable, terminal = lc_runs(
        order, http["transient"], http["correctable"], http["terminal"]
    )
    assert (transient.succeeded, transient.model_requests, transient.tool_calls) == (True, 2, 2)
    assert correctable.succeeded and correctable.model_requests == 3
    assert "Fix required: Correct the request" in correctable.read[0]
    assert (terminal.model_requests, terminal.tool_calls) == (2, 1)
    assert "do not call again" in terminal.read[0]
