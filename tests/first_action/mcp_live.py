"""One MCP server, live: the same session script direct and through the gateway, each against
a fresh server in the same reset state, judged as the weakest agent would.

A stdio server goes through `mendpoint stdio -- CMD` (and, with `bridge: true`, through a
`command:` route too); a Streamable HTTP server through a `type: mcp` route with nothing but
its upstream. Both use the embedded defaults, no rules of their own. The session is
initialize, notifications/initialized, tools/list (the gateway reads the tools' annotations
there), then every call in order; the direct run's raw responses are recorded for the replay.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.first_action.agent import read_mcp
from tests.first_action.environment import MENDPOINT, places, run_base
from tests.first_action.http_live import in_body
from tests.first_action.mcp_client import INITIALIZED, HttpPeer, Peer, StdioPeer, initialize
from tests.first_action.model import HeldOut, McpCall, McpServer, Places
from tests.first_action.outcome import Outcome, says_nothing
from tests.first_action.processes import Group, StartFailed, group, run_command
from tests.support.ports import free_port

FIRST_CALL_ID = 2


@dataclass
class ServerRun:
    server: str
    outcomes: list[Outcome]
    recording: dict[str, Any]
    failed: str | None = None
    seconds: float = 0.0


def call_message(call: McpCall, request_id: int, fill: Places) -> dict[str, Any]:
    if call.tool is not None:
        params: dict[str, Any] = {"name": call.tool, "arguments": fill.fill_json(call.arguments)}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": call.method}
    if call.params is not None:
        message["params"] = fill.fill_json(call.params)
    return message


def safe_env(fill: Places, extra: dict[str, str]) -> dict[str, str]:
    """Anything that honours the proxy variables goes to a closed loopback port, never out."""
    closed = f"http://127.0.0.1:{fill.values['closed']}"
    env = {
        "HTTP_PROXY": closed,
        "HTTPS_PROXY": closed,
        "http_proxy": closed,
        "https_proxy": closed,
        "ALL_PROXY": closed,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "HOME": str(Path(fill.values["tmp"]) / "home"),
        "npm_config_offline": "true",
    }
    return env | {k: fill.fill(v) for k, v in extra.items()}


async def session(peer: Peer, server: McpServer, fill: Places) -> dict[int, str | None]:
    """The script: every response's raw text by request id (None: no answer in time)."""
    answers: dict[int, str | None] = {}
    answers[0] = await peer.request(initialize(0), server.start_timeout_s)
    if answers[0] is None:
        raise StartFailed(f"{server.name}: no answer to initialize")
    await peer.notify(INITIALIZED)
    answers[1] = await peer.request(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, 30
    )
    for index, call in enumerate(server.calls):
        request_id = FIRST_CALL_ID + index
        answers[request_id] = await peer.request(
            call_message(call, request_id, fill), call.timeout_s
        )
    return answers


async def run_server(server: McpServer) -> ServerRun:
    started = time.monotonic()
    base = run_base("mcp", server.name)
    fill = places(base / "run")
    outcomes: list[Outcome] = []
    try:
        async with group(base) as services:
            await prepare(server, fill, services, base)
            direct = await one_run(server, fill, base, services, "direct")
            for via in vias(server):
                through = await one_run(server, fill, base, services, via)
                outcomes.extend(judge_all(server, direct, through, via))
    except StartFailed as exc:
        return ServerRun(server.name, [], {}, failed=str(exc), seconds=time.monotonic() - started)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    recording = {
        "server": server.name,
        "requests": recorded_requests(server, fill),
        "responses": {str(k): v for k, v in direct.items()},
    }
    return ServerRun(server.name, outcomes, recording, seconds=time.monotonic() - started)


async def prepare(server: McpServer, fill: Places, running: Group, base: Path) -> None:
    """The server's services (a database on loopback), then its one-off set-up commands."""
    (base / "run").mkdir(exist_ok=True)
    for index, spec in enumerate(server.services):
        await running.start(
            f"service-{index}",
            fill.fill_all(spec.command),
            port=int(fill.fill(spec.port)) if spec.port else None,
            cwd=fill.fill(spec.cwd) if spec.cwd else str(base),
            env={k: fill.fill(v) for k, v in spec.env.items()},
            timeout_s=spec.start_timeout_s,
        )
    for index, argv in enumerate(server.prepare):
        await run_command(fill.fill_all(argv), str(base / "run"), {}, base / f"prepare-{index}.log")


def vias(server: McpServer) -> list[str]:
    if server.transport == "http":
        return ["route"]
    return ["stdio", "bridge"] if server.bridge else ["stdio"]


def recorded_requests(server: McpServer, fill: Places) -> dict[str, Any]:
    requests: dict[str, Any] = {"0": initialize(0), "1": {"method": "tools/list"}}
    for index, call in enumerate(server.calls):
        requests[str(FIRST_CALL_ID + index)] = call_message(call, FIRST_CALL_ID + index, fill)
    return requests


async def reset(server: McpServer, fill: Places, base: Path) -> None:
    run_dir = Path(fill.values["tmp"])
    for index, argv in enumerate(server.reset):
        await run_command(fill.fill_all(argv), str(run_dir), {}, base / f"reset-{index}.log")
    (run_dir / "home").mkdir(exist_ok=True)


async def one_run(
    server: McpServer, fill: Places, base: Path, running: Group, via: str
) -> dict[int, str | None]:
    """Reset, start the server the way `via` says, run the script, stop it."""
    await reset(server, fill, base)
    env = safe_env(fill, server.env)
    argv = fill.fill_all(server.command)
    log = base / f"{via}.log"
    cwd = fill.values["tmp"]
    if server.transport == "stdio" and via in ("direct", "stdio"):
        if via == "stdio":
            argv = [str(MENDPOINT), "stdio", "--", *argv]
        peer: Peer = await StdioPeer.start(argv, env, cwd, log)
        try:
            return await session(peer, server, fill)
        finally:
            await peer.close()
    async with group(base) as own:
        url = await start_http(server, fill, own, base, via, argv, env)
        http_peer = HttpPeer(url)
        try:
            return await session(http_peer, server, fill)
        finally:
            await http_peer.close()


async def start_http(
    server: McpServer,
    fill: Places,
    running: Group,
    base: Path,
    via: str,
    argv: list[str],
    env: dict[str, str],
) -> str:
    """The server on its port (or the bridge's child), and a gateway in front unless direct."""
    cwd = fill.values["tmp"]
    route: dict[str, Any] = {"name": "mcp", "prefix": "/", "type": "mcp"}
    if server.transport == "http":
        port = int(fill.fill(server.port))
        await running.start(
            f"{via}-server", argv, port=port, cwd=cwd, env=env, timeout_s=server.start_timeout_s
        )
        upstream = f"http://127.0.0.1:{port}"
        if via == "direct":
            return upstream + server.http_path
        route["upstream"] = upstream
        path = server.http_path
    else:
        route["command"] = argv
        route["prefix"] = "/mcp"
        path = "/mcp"
    listen = free_port()
    config = base / f"{via}-gateway.yaml"
    config.write_text(yaml.safe_dump({"routes": [route]}, sort_keys=False))
    gateway = [str(MENDPOINT), "serve", "--config", str(config)]
    gateway += ["--listen", f"127.0.0.1:{listen}", "--admin", "off"]
    await running.start(
        f"{via}-gateway",
        gateway,
        port=listen,
        cwd=cwd,
        env=env | {"MENDPOINT_LOG_LEVEL": "warning"},
    )
    return f"http://127.0.0.1:{listen}{path}"


def judge_all(
    server: McpServer,
    direct: dict[int, str | None],
    through: dict[int, str | None],
    via: str,
) -> list[Outcome]:
    name = server.name if via in ("stdio", "route") else f"{server.name} (bridge)"
    return [
        judge(
            name,
            call,
            direct.get(FIRST_CALL_ID + i),
            through.get(FIRST_CALL_ID + i),
            server.held_out,
        )
        for i, call in enumerate(server.calls)
    ]


def judge(
    stack: str,
    call: McpCall,
    direct: str | None,
    through: str | None,
    held_out: HeldOut | None = None,
) -> Outcome:
    outcome = Outcome("mcp", stack, call.id, call.expect, call.reason, call.words)
    outcome.held_out = held_out
    direct_message = parse(direct)
    outcome.upstream = describe(direct_message) if direct_message else "no answer in time"
    outcome.kind = kind_of(direct_message)
    outcome.wordless = call.expect != "success" and says_nothing(failure_text(direct_message))
    if direct is None:
        outcome.problems.append("the server gave no answer in time (direct)")
    missing = [w for w in call.words if direct is None or not in_body(w, direct.encode())]
    if missing:
        outcome.problems.append(f"words not in the server's response: {missing}")
    through_message = parse(through)
    if through_message is None:
        outcome.problems.append("no answer in time through the gateway")
        return outcome
    reading = read_mcp(through_message)
    if call.expect == "success":
        outcome.got = "success" if reading is None else None
        outcome.identical = through == direct
        if not outcome.identical:
            outcome.problems.append(
                f"success differs: direct {direct!r:.300} through {through!r:.300}"
            )
        return outcome
    if reading is None:
        outcome.got = "success"
        outcome.reported_as_success = outcome.kind == "result"
        return outcome
    outcome.reading = reading
    outcome.got = reading.action
    return outcome


def parse(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def kind_of(message: dict[str, Any] | None) -> str:
    if message is None:
        return "no answer"
    error = message.get("error")
    if isinstance(error, dict):
        data = error.get("data")
        shape = "absent" if data is None else type(data).__name__
        return f"jsonrpc {error.get('code')} (data {shape})"
    result = message.get("result")
    if isinstance(result, dict) and result.get("isError") is True:
        return "isError"
    return "result"


def failure_text(message: dict[str, Any] | None) -> str:
    """What a failed call says in words: the JSON-RPC error's message, or the result's text
    items joined; empty for no answer."""
    if message is None:
        return ""
    error = message.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or "")
    result = message.get("result")
    if not isinstance(result, dict):
        return ""
    items = result.get("content") or []
    return " ".join(
        str(item.get("text", "")) for item in items if isinstance(item, dict) and "text" in item
    )


def describe(message: dict[str, Any]) -> str:
    error = message.get("error")
    if isinstance(error, dict):
        text = f"{error.get('message')!s:.200}"
        return f"jsonrpc {error.get('code')}: {text} data={error.get('data')!r:.80}"
    result = message.get("result")
    if isinstance(result, dict):
        texts = [
            str(item.get("text", ""))
            for item in result.get("content") or []
            if isinstance(item, dict) and item.get("type") == "text"
        ]
        flag = "isError " if result.get("isError") else ""
        return f"{flag}{' | '.join(texts)[:200]!r}"
    return repr(message)[:200]
