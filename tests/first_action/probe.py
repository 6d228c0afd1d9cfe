"""For whoever writes scenarios: a stack's direct answers only, no gateway.

    python -m tests.first_action.probe NAME

Starts the stack as `make corpus` does and prints what it answers to each scenario's request,
so the upstream's words can be copied into the scenario before the gateway's answer is seen.
"""

from __future__ import annotations

import asyncio
import sys

from tests.first_action.environment import places, run_base
from tests.first_action.http_live import build, client, send, start_stack
from tests.first_action.mcp_live import FIRST_CALL_ID, one_run, prepare
from tests.first_action.model import HTTP_DIR, load_http_stacks, load_mcp_servers
from tests.first_action.processes import group


async def probe(name: str) -> None:
    (stack,) = load_http_stacks([name])
    tmp = run_base("http", name)
    fill = places(tmp)
    async with group(tmp) as running, client() as session:
        await start_stack(stack, fill, running, tmp)
        upstream = fill.fill(stack.upstream)
        for scenario in stack.scenarios:
            for setup in scenario.setup:
                await send(session, upstream, build(setup, fill))
            if scenario.pause_s:
                await asyncio.sleep(scenario.pause_s)
            answer = await send(session, upstream, build(scenario.request, fill))
            print(f"== {scenario.id} ({scenario.expect}): {answer.status} {answer.fault or ''}")
            for header, value in answer.headers:
                print(f"   {header}: {value}")
            print("   " + answer.text()[:1500].decode("utf-8", errors="replace"))


async def probe_mcp(name: str, tools: bool) -> None:
    """The server's direct answers to its calls (and its tools/list with --tools)."""
    (server,) = load_mcp_servers([name])
    base = run_base("mcp", name)
    fill = places(base / "run")
    try:
        async with group(base) as services:
            await prepare(server, fill, services, base)
            answers = await one_run(server, fill, base, services, "direct")
    finally:
        print(f"(logs in {base})")
    if tools:
        print(answers.get(1))
    for index, call in enumerate(server.calls):
        print(f"== {call.id} ({call.expect}): {answers.get(FIRST_CALL_ID + index)}")


if __name__ == "__main__":
    if (HTTP_DIR / f"{sys.argv[1]}.yaml").exists():
        asyncio.run(probe(sys.argv[1]))
    else:
        asyncio.run(probe_mcp(sys.argv[1], "--tools" in sys.argv))
