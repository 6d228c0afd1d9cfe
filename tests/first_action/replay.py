"""The corpus in seconds: the recorded upstream answers, fed through the gateway.

    python -m tests.first_action.replay [--only NAME,...]

HTTP: a loopback server answers each request with the recorded answer of the scenario its
`X-Corpus-Scenario` header names (status line, headers and body as recorded; framing its own),
and one `mendpoint serve --upstream` (the embedded default, no config) stands in front of it.
MCP: `mendpoint stdio -- python replay_mcp_server.py RECORDING` answers each request id with
the server's recorded response text. Scenarios, expectations and judging are the live run's
(docs/packs/corpus.md#replay); what the replay cannot show is the live run's own: a stack
that no longer behaves as recorded, and the bridge and HTTP-route transports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

from gateway.config.loader import embedded_config
from gateway.serve.app import GatewayServer
from tests.first_action.environment import MENDPOINT, run_base
from tests.first_action.http_live import SCENARIO_HEADER, Sent, client, judge, send
from tests.first_action.mcp_client import INITIALIZED, StdioPeer
from tests.first_action.mcp_live import FIRST_CALL_ID
from tests.first_action.mcp_live import judge as judge_call
from tests.first_action.model import (
    RECORDED,
    HttpScenario,
    HttpStack,
    McpServer,
    load_http_stacks,
    load_mcp_servers,
)
from tests.first_action.outcome import Answer, Outcome
from tests.first_action.processes import group
from tests.first_action.score import Report
from tests.support.ports import free_port

HERE = Path(__file__).resolve().parent
HTTP_AT_ONCE = 8  # recorded answers do not depend on each other: a few in flight at once
FRAMING = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass(frozen=True)
class Recorded:
    sent: Sent
    answer: Answer


def load_recording(stack: HttpStack) -> dict[str, Recorded] | None:
    path = RECORDED / "http" / f"{stack.name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text("utf-8"))
    out = {}
    for item in data["scenarios"]:
        request = item["request"]
        body = request.get("body")
        sent = Sent(
            request["method"],
            request["path"],
            tuple((str(n), str(v)) for n, v in request["headers"]),
            body.encode("utf-8") if body is not None else None,
        )
        out[item["id"]] = Recorded(sent, Answer.from_json(item["answer"]))
    return out


def wire(answer: Answer, method: str) -> bytes:
    """The recorded answer as the upstream wrote it, framed by Content-Length, closing."""
    status = answer.status or 502
    phrase = answer.phrase or HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {phrase}"]
    lines += [f"{n}: {v}" for n, v in answer.headers if n.lower() not in FRAMING]
    no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
    if not no_body:
        lines.append(f"Content-Length: {len(answer.body)}")
    lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if no_body else head + answer.body


@contextlib.asynccontextmanager
async def replay_server(answers: dict[str, Answer]) -> AsyncIterator[str]:
    """Answers `X-Corpus-Scenario: STACK/ID` with that scenario's recorded answer."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *fields = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in fields:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length") or 0)
            if length:
                await reader.readexactly(length)
            key = headers.get(SCENARIO_HEADER.lower(), "")
            answer = answers.get(key)
            if answer is None:
                writer.write(b"HTTP/1.1 599 No Recording\r\nContent-Length: 0\r\n\r\n")
            else:
                writer.write(wire(answer, request_line.split(" ")[0]))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def gateway_process(upstream: str) -> AsyncIterator[str]:
    """`mendpoint serve --upstream URL` as a new user runs it: the embedded default."""
    base = run_base("replay", "http")
    async with group(base) as running:
        port = free_port()
        argv = [str(MENDPOINT), "serve", "--upstream", upstream]
        argv += ["--listen", f"127.0.0.1:{port}", "--admin", "off"]
        await running.start("gateway", argv, port=port, env={"MENDPOINT_LOG_LEVEL": "warning"})
        yield f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def gateway_in_process(upstream: str) -> AsyncIterator[str]:
    """The same server `serve --upstream URL` runs (`GatewayServer` on `embedded_config`),
    in this event loop: no process start, so the replay takes seconds
    (tests/first_action/test_thresholds.py)."""
    server = GatewayServer(embedded_config(upstream, "127.0.0.1:0"))
    host, port = await server.start("127.0.0.1:0", None)
    try:
        yield f"http://{host}:{port}"
    finally:
        await server.stop()


async def replay_http(
    stacks: list[HttpStack], in_process: bool = False
) -> tuple[list[Outcome], dict[str, str]]:
    """Every recorded HTTP scenario through a gateway on the embedded default: a
    `mendpoint serve` process (as `make corpus-replay` runs it), or `in_process`."""
    recorded: dict[str, dict[str, Recorded]] = {}
    missing = {}
    for stack in stacks:
        recording = load_recording(stack)
        if recording is None:
            missing[f"http:{stack.name}"] = "no recording (run make corpus)"
        else:
            recorded[stack.name] = recording
    answers = {
        f"{name}/{sid}": item.answer
        for name, items in recorded.items()
        for sid, item in items.items()
    }
    start_gateway = gateway_in_process if in_process else gateway_process
    slots = asyncio.Semaphore(HTTP_AT_ONCE)

    async def one(stack: HttpStack, scenario: HttpScenario, item: Recorded) -> Outcome:
        tagged = Sent(
            item.sent.method,
            item.sent.path,
            (*item.sent.headers, (SCENARIO_HEADER, f"{stack.name}/{scenario.id}")),
            item.sent.body,
        )
        async with slots:
            through = await send(session, gateway, tagged)
        outcome = judge(stack.name, scenario, item.answer, through)
        outcome.held_out = stack.held_out
        return outcome

    async with (
        replay_server(answers) as upstream,
        start_gateway(upstream) as gateway,
        client() as session,
    ):
        runs = [
            one(stack, scenario, recorded[stack.name][scenario.id])
            for stack in stacks
            for scenario in stack.scenarios
            if scenario.id in recorded.get(stack.name, {})
        ]
        outcomes = list(await asyncio.gather(*runs))
    return outcomes, missing


MCP_AT_ONCE = 4


async def replay_mcp(servers: list[McpServer]) -> tuple[list[Outcome], dict[str, str]]:
    """Each server's recording through its own `mendpoint stdio`, a few at a time."""
    missing = {}
    present = []
    for server in servers:
        path = RECORDED / "mcp" / f"{server.name}.json"
        if path.exists():
            present.append((server, json.loads(path.read_text("utf-8")), path))
        else:
            missing[f"mcp:{server.name}"] = "no recording (run make corpus)"
    slots = asyncio.Semaphore(MCP_AT_ONCE)

    async def one(server: McpServer, recording: dict[str, Any], path: Path) -> list[Outcome]:
        async with slots:
            return await replay_one(server, recording, path)

    runs = await asyncio.gather(*(one(*item) for item in present))
    return [outcome for run in runs for outcome in run], missing


async def replay_one(server: McpServer, recording: dict[str, Any], path: Path) -> list[Outcome]:
    base = run_base("replay", server.name)
    argv = [str(MENDPOINT), "stdio", "--", sys.executable, str(HERE / "replay_mcp_server.py")]
    peer = await StdioPeer.start([*argv, str(path)], {}, str(base), base / "stdio.log")
    requests: dict[str, Any] = recording["requests"]
    responses: dict[str, str | None] = recording["responses"]
    try:
        await peer.request(requests["0"], 30)
        await peer.notify(INITIALIZED)
        await peer.request({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, 30)
        outcomes = []
        for index, call in enumerate(server.calls):
            request_id = FIRST_CALL_ID + index
            message = requests.get(str(request_id))
            if message is None:
                continue
            through = await peer.request(message, 30)
            direct = responses.get(str(request_id))
            outcomes.append(judge_call(server.name, call, direct, through, server.held_out))
        return outcomes
    finally:
        await peer.close()


async def replay(names: list[str] | None) -> Report:
    http, missing_http = await replay_http(load_http_stacks(names))
    mcp, missing_mcp = await replay_mcp(load_mcp_servers(names))
    return Report(http + mcp, missing_http | missing_mcp, {})


if __name__ == "__main__":
    from tests.first_action.run import publish

    parser = argparse.ArgumentParser(prog="python -m tests.first_action.replay")
    parser.add_argument("--only", default="", help="comma-separated stack or server names")
    args = parser.parse_args()
    publish(asyncio.run(replay([n for n in args.only.split(",") if n] or None)), "replay")
