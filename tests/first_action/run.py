"""`make corpus`: the first-action corpus, live (docs/packs/corpus.md).

    python -m tests.first_action.run [--only NAME,...] [--http | --mcp] [--no-record]

Starts each stack and server in turn, sends every scenario direct and through a gateway on the
embedded default, prints the report and writes it to build/corpus/report.{txt,json}; the
direct answers go to tests/first_action/recorded/ for the replay
(`python -m tests.first_action.replay`). A stack that fails to start is reported and skipped.
Bounded: every request has a 30 s limit, every start a limit of its own (at most 180 s), and
`--budget-s` (default 1500) stops starting new stacks once it has passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from tests.first_action.environment import missing_setup
from tests.first_action.http_live import run_stack
from tests.first_action.mcp_live import run_server
from tests.first_action.model import RECORDED, load_http_stacks, load_mcp_servers
from tests.first_action.outcome import Outcome
from tests.first_action.score import Report
from tests.support.paths import REPO

OUT = REPO / "build" / "corpus"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.first_action.run")
    parser.add_argument("--only", default="", help="comma-separated stack or server names")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--http", action="store_true", help="HTTP stacks only")
    which.add_argument("--mcp", action="store_true", help="MCP servers only")
    parser.add_argument("--no-record", action="store_true", help="leave recorded/ as it is")
    parser.add_argument("--budget-s", type=float, default=1500.0)
    return parser.parse_args(argv)


async def main(args: argparse.Namespace) -> Report:
    names = [n for n in args.only.split(",") if n] or None
    outcomes: list[Outcome] = []
    failed: dict[str, str] = {}
    seconds: dict[str, float] = {}
    deadline = time.monotonic() + args.budget_s
    if not args.mcp:
        for stack in load_http_stacks(names):
            if time.monotonic() > deadline:
                failed[f"http:{stack.name}"] = "not run: the run's time budget was spent"
                continue
            print(f"http: {stack.name} ...", file=sys.stderr, flush=True)
            run = await run_stack(stack)
            seconds[f"http:{stack.name}"] = round(run.seconds, 1)
            if run.failed:
                failed[f"http:{stack.name}"] = run.failed
                continue
            outcomes.extend(run.outcomes)
            if not args.no_record:
                write(RECORDED / "http" / f"{stack.name}.json", run.recording)
    if not args.http:
        for server in load_mcp_servers(names):
            if time.monotonic() > deadline:
                failed[f"mcp:{server.name}"] = "not run: the run's time budget was spent"
                continue
            print(f"mcp: {server.name} ...", file=sys.stderr, flush=True)
            mcp_run = await run_server(server)
            seconds[f"mcp:{server.name}"] = round(mcp_run.seconds, 1)
            if mcp_run.failed:
                failed[f"mcp:{server.name}"] = mcp_run.failed
            outcomes.extend(mcp_run.outcomes)
            if mcp_run.recording and not args.no_record:
                write(RECORDED / "mcp" / f"{server.name}.json", mcp_run.recording)
    return Report(outcomes, failed, seconds)


def write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", "utf-8")


def publish(report: Report, name: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    text = report.text()
    (OUT / f"{name}.txt").write_text(text + "\n", "utf-8")
    write(OUT / f"{name}.json", report.to_json())
    print(text)
    print(f"(written to {OUT / name}.txt and .json)")


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    missing = missing_setup(http=not arguments.mcp, mcp=not arguments.http)
    if missing:
        sys.exit(f"not installed: {', '.join(missing)}; run tests/first_action/setup.sh")
    publish(asyncio.run(main(arguments)), "report")
