"""`make bench-agents`: the work an agent wastes on a failed tool call, with each framework's
default and with mendpoint-agents' adapter (docs/agents.md#what-it-saves).

Each framework (pydantic-ai, the OpenAI Agents SDK, LangChain) runs the tasks of
clients/python/tests/tasks.py, one per failure class (transient: a 429 with a delay;
caller-correctable: a validation failure with `fix_required`; terminal: a failure no call
fixes), over MCP (the tools server behind `mendpoint stdio`) and HTTP (the orders API behind
`mendpoint serve`), all on loopback. The model is each framework's own scripted model driven
by the same naive mind (tasks.py), which waits `--think-s` per turn as a model would: no LLM
runs. For each task: tool calls that reached the server, model turns, wall seconds until the
run ended, and whether it ended in success; the median over `--reps` repetitions.

The issue's targets, checked on the adapter's rows: a transient failure succeeds with no extra
model turn (2: the call, the answer); a terminal one costs one tool call and exactly one model
turn after it (2 in all); a correctable one reaches the model with its `fix_required`.
LangChain runs in .venv/agents-langchain (its MCP adapters need the 1.x MCP SDK), through
clients/python/tests/lc_agents.py.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLIENT_TESTS = ROOT / "clients" / "python" / "tests"
if str(CLIENT_TESTS) not in sys.path:  # the agents' helpers are modules of that directory
    sys.path.insert(0, str(CLIENT_TESTS))

import oai_agents  # noqa: E402  (after the path they need)
import pai_agents  # noqa: E402
from agents_live import Api, orders_behind_gateway  # noqa: E402
from tasks import Run, Task, Transport, tasks  # noqa: E402

FRAMEWORKS = ("pydantic-ai", "openai-agents", "langchain")
TRANSPORTS: tuple[Transport, ...] = ("mcp", "http")
CLASSES = ("transient", "correctable", "terminal")
LC_PYTHON = ROOT / ".venv" / "agents-langchain" / "bin" / "python"
LC_AGENTS = CLIENT_TESTS / "lc_agents.py"
THINK_S = 0.5
"""A model's turn: a fast hosted model answers a short tool-calling turn in about that."""


async def pydantic_ai(
    transport: Transport, adapter: bool, todo: list[Task], directory: Path, api: Api, think: float
) -> list[Run]:
    if transport == "http":
        return [await pai_agents.run_http(api, t, adapter, think) for t in todo]
    async with pai_agents.mcp_toolset(directory, adapter) as (toolset, calls):
        return [await pai_agents.run_mcp(toolset, calls, t, adapter, think) for t in todo]


async def openai_agents(
    transport: Transport, adapter: bool, todo: list[Task], directory: Path, api: Api, think: float
) -> list[Run]:
    if transport == "http":
        return [await oai_agents.run_http(api, t, adapter, think) for t in todo]
    async with oai_agents.mcp_server(directory, adapter) as (server, calls):
        return [await oai_agents.run_mcp(server, calls, t, adapter, think) for t in todo]


async def langchain(
    transport: Transport, adapter: bool, todo: list[Task], directory: Path, api: Api, think: float
) -> list[Run]:
    order: dict[str, Any] = {"adapter": adapter, "think_s": think, "dir": str(directory)}
    order["kind"] = transport
    order["api"] = {"direct": api.direct, "gateway": api.gateway, "token": str(api.token_file)}
    order["tasks"] = [dataclasses.asdict(task) for task in todo]
    done = await asyncio.to_thread(
        subprocess.run,
        [str(LC_PYTHON), str(LC_AGENTS), json.dumps(order)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"lc_agents.py exited {done.returncode}:\n{done.stderr[-4000:]}")
    return [Run(**json.loads(line)) for line in done.stdout.splitlines()]


Runner = Callable[[Transport, bool, list[Task], Path, Api, float], Awaitable[list[Run]]]
RUNNERS: dict[str, Runner] = {
    "pydantic-ai": pydantic_ai,
    "openai-agents": openai_agents,
    "langchain": langchain,
}


def plan(frameworks: list[str], reps: int) -> Iterator[tuple[int, str, Transport, bool]]:
    """Every (rep, framework, transport, adapter), the adapter's rows interleaved with the
    default's so drift on a shared machine lands on both."""
    for rep in range(reps):
        for framework in frameworks:
            for transport in TRANSPORTS:
                for adapter in (False, True) if rep % 2 == 0 else (True, False):
                    yield rep, framework, transport, adapter


async def measure(frameworks: list[str], reps: int, think: float, root: Path) -> list[Run]:
    runs: list[Run] = []
    (root / "api").mkdir()
    with orders_behind_gateway(root / "api") as api:
        for rep, framework, transport, adapter in plan(frameworks, reps):
            directory = root / f"{framework}-{transport}-{adapter}-{rep}"
            directory.mkdir(parents=True)
            todo = tasks(transport)  # fresh rate-limit keys for each group
            done = await RUNNERS[framework](transport, adapter, todo, directory, api, think)
            print(f"  {framework} {transport} adapter={adapter} rep {rep}", file=sys.stderr)
            runs += done
    return runs


def summary(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per framework, transport and class: medians without and with the adapter."""
    rows = []
    for framework in dict.fromkeys(r.framework for r in runs):
        for transport in TRANSPORTS:
            for failure in CLASSES:
                row: dict[str, Any] = {"framework": framework, "transport": transport}
                row["failure"] = failure
                for adapter, side in ((False, "default"), (True, "adapter")):
                    mine = [
                        r
                        for r in runs
                        if (r.framework, r.transport, r.failure, r.adapter)
                        == (framework, transport, failure, adapter)
                    ]
                    if not mine:
                        continue
                    row[side] = {
                        "tool_calls": statistics.median(r.tool_calls for r in mine),
                        "model_turns": statistics.median(r.model_requests for r in mine),
                        "seconds": statistics.median(r.seconds for r in mine),
                        "succeeded": sum(r.succeeded for r in mine),
                        "runs": len(mine),
                        "fix_seen": all(any("Fix required" in t for t in r.read) for r in mine),
                    }
                if "default" in row or "adapter" in row:
                    rows.append(row)
    return rows


def target_misses(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's three targets, on the adapter's medians."""
    misses = []
    for row in rows:
        mine = row.get("adapter")
        if mine is None:
            continue
        name = f"{row['framework']} {row['transport']} {row['failure']}"
        if row["failure"] == "transient" and (
            mine["model_turns"] != 2 or mine["succeeded"] != mine["runs"]
        ):
            misses.append(f"{name}: {mine['model_turns']:g} model turns, not 2 with success")
        if row["failure"] == "terminal" and (mine["model_turns"], mine["tool_calls"]) != (2, 1):
            misses.append(f"{name}: {mine['tool_calls']:g} calls, {mine['model_turns']:g} turns")
        if row["failure"] == "correctable" and not mine["fix_seen"]:
            misses.append(f"{name}: the model never read `Fix required`")
    return misses


def _side(cell: dict[str, Any] | None) -> tuple[str, str, str, str]:
    if cell is None:
        return ("—",) * 4
    ended = "success" if cell["succeeded"] == cell["runs"] else "failure"
    if 0 < cell["succeeded"] < cell["runs"]:
        ended = f"{cell['succeeded']}/{cell['runs']} success"
    return (f"{cell['tool_calls']:g}", f"{cell['model_turns']:g}", f"{cell['seconds']:.2f}", ended)


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| framework | transport | failure | tool calls | model turns | seconds | ended |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        default, adapter = _side(row.get("default")), _side(row.get("adapter"))
        cells = [f"{d} → {a}" if d != a else d for d, a in zip(default, adapter, strict=True)]
        names = [row["framework"], row["transport"], row["failure"]]
        lines.append("| " + " | ".join(names + cells) + " |")
    settings = results["settings"]
    lines.append("")
    lines.append(
        f"Each cell: the framework's default → with the adapter; medians of {settings['reps']} "
        f"runs, {settings['think_s']} s per model turn."
    )
    misses = results["misses"]
    verdict = "missed: " + "; ".join(misses) if misses else "all three hold."
    lines.append(f"Targets: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--think-s", type=float, default=THINK_S, help="a model turn's time")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    frameworks = args.frameworks.split(",")
    unknown = set(frameworks) - set(FRAMEWORKS)
    if unknown:
        parser.error(f"unknown frameworks: {', '.join(sorted(unknown))}")
    if "langchain" in frameworks and not LC_PYTHON.exists():
        parser.error("no .venv/agents-langchain: `make agents-langchain` creates it")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="mendpoint-bench-agents-") as tmp:
        runs = asyncio.run(measure(frameworks, args.reps, args.think_s, Path(tmp)))
    rows = summary(runs)
    results = {
        "settings": {"reps": args.reps, "think_s": args.think_s, "frameworks": frameworks},
        "elapsed_s": round(time.time() - started, 1),
        "runs": [run.to_json() for run in runs],
        "rows": rows,
        "misses": target_misses(rows),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / time.strftime("agents-%Y%m%d-%H%M%S.json")
    path.write_text(json.dumps(results, indent=1))
    print(markdown(results))
    print(f"\nresults: {path}", file=sys.stderr)
    return 1 if results["misses"] else 0


if __name__ == "__main__":
    sys.exit(main())
