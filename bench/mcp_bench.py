"""The MCP rows: `tools/call` round trips through each system, half of the calls failing.

The systems, all serving Streamable HTTP at `/mcp` to the same wrk client (`mcp.lua`):

- `direct`: the fast server itself (`bench/mcp_server.py --port`), moved to the system core
  the way nginx is for the HTTP `direct` rows.
- `bare`: the bare aiohttp proxy in front of it: what any Python hop costs.
- `mendpoint-original` / `mendpoint-additive`: a `type: mcp` route to it (the same rules and
  skills as the HTTP rows); `original` relays, `additive` upgrades every tool error.
- `mendpoint-bridge`: a `type: mcp` route with `command:`, the stdio variant of the server
  (`--stdio`) as its child: one child per MCP session.
- `mcp-proxy`: PyPI `mcp-proxy` (sparfenyuk) serving the same stdio server; one child shared
  by every session. This and `mendpoint-bridge` are the like-for-like pair.

Where the server is a process of its own (the HTTP server, or the stdio children once the
sessions are open) it runs on the load core with wrk, so the system core and the CPU figure
hold only the system under test. Every measurement first opens its sessions and checks one
success and one failure (upgraded by the systems that upgrade, untouched by the others), so a
broken setup is never benchmarked; the load's replies are sorted and counted the same way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import fixtures, harness
from bench.baseline import Baseline, base_name
from bench.mcp_server import PATH, PROTOCOL_VERSION, TOOL, enoent, missing_path, ok_path
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "bench" / "mcp_server.py"
LUA = ROOT / "bench" / "mcp.lua"
MCP_PROXY = ROOT / ".venv" / "bench-mcpproxy" / "bin" / "mcp-proxy"
STDIO_COMMAND = [sys.executable, str(SERVER), "--stdio"]
SYSTEMS = (
    "direct",
    "bare",
    "mendpoint-original",
    "mendpoint-additive",
    "mendpoint-bridge",
    "mcp-proxy",
)
UPGRADING = ("mendpoint-additive", "mendpoint-bridge")
BEHIND_HTTP = ("bare", "mendpoint-original", "mendpoint-additive")
FAILURE_META = "mendpoint/failure"
TOOL_FAILURE_META = "io.modelcontextprotocol/toolFailure"
CHECK_ID = 1_000_000_000  # ids of the sample calls: far from the load's 1, 2, 3, ...

Command = Callable[[str, int, Path], list[str]]


@dataclass(frozen=True)
class McpLoad:
    """One wrk run of tools/call, with its replies sorted by what came back."""

    load: harness.Load
    replies: dict[str, int]


def mendpoint_config(upstream: str | None, mode: str) -> dict[str, object]:
    """The HTTP rows' gateway config (shipped defaults, 50 rules, 20 skills) with one MCP
    route: to `upstream`, or bridging the stdio server when `upstream` is None."""
    config = fixtures.mendpoint_config(
        upstream or "http://127.0.0.1:9", fixtures.Variant(mode, access_log=False)
    )
    route: dict[str, object] = {"name": "tools", "prefix": "/", "type": "mcp", "mode": mode}
    if upstream is None:
        # wrk's connections all come from 127.0.0.1: one anonymous caller with every session.
        route.update(command=STDIO_COMMAND, max_sessions=64, max_sessions_per_address=64)
    else:
        route["upstream"] = upstream
    config["routes"] = [route]
    return config


def mendpoint(mode: str, bridge: bool = False) -> Command:
    def command(upstream: str, port: int, root: Path) -> list[str]:
        config = mendpoint_config(None if bridge else upstream, mode)
        path = root / f"mendpoint-mcp-{mode}{'-bridge' if bridge else ''}-{port}.yaml"
        path.write_text(json.dumps(config, indent=1))
        argv = [sys.executable, "-m", "gateway", "serve", "--config", str(path)]
        return [*argv, "--listen", f"127.0.0.1:{port}"]

    return command


def mcp_proxy(_upstream: str, port: int, _root: Path) -> list[str]:
    """mcp-proxy serving the stdio server over Streamable HTTP (its JSON-response mode)."""
    argv = [str(MCP_PROXY), "--host", "127.0.0.1", "--port", str(port)]
    return [*argv, "--log-level", "WARNING", "--", *STDIO_COMMAND]


def commands(
    generic: dict[str, Command | None], baseline: Baseline | None = None
) -> dict[str, Command]:
    """The command of every MCP system (the bare proxy is the HTTP rows' own), and of each
    twin the generic table has on the baseline's code."""
    bare = generic["bare"]
    assert bare is not None
    table: dict[str, Command] = {
        "bare": bare,
        "mendpoint-original": mendpoint("original"),
        "mendpoint-additive": mendpoint("additive"),
        "mendpoint-bridge": mendpoint("additive", bridge=True),
        "mcp-proxy": mcp_proxy,
    }
    if baseline is not None:
        for name in generic:
            if name != base_name(name) and base_name(name) in table:
                table[name] = baseline.wrap(table[base_name(name)])
    return table


# --- the client side: sessions and the checked sample calls -----------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    message: Any


def post(url: str, message: dict[str, Any], session: str | None) -> Answer:
    """One POST as an MCP client sends it; the JSON-RPC answer from a JSON or SSE body."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL_VERSION,
    }
    if session:
        headers["Mcp-Session-Id"] = session
    data = json.dumps(message).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, got, body = response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        status, got, body = exc.code, dict(exc.headers.items()), exc.read()
    return Answer(status, got, _decode(body, got.get("Content-Type", ""), message.get("id")))


def _decode(body: bytes, content_type: str, rid: Any) -> Any:
    if not body:
        return None
    if content_type.startswith("text/event-stream"):
        for line in body.decode().splitlines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if isinstance(message, dict) and message.get("id") == rid:
                    return message
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body[:200]


def open_sessions(url: str, count: int) -> list[str]:
    """`initialize` and `notifications/initialized`, `count` times: the session ids."""
    sessions: list[str] = []
    for i in range(count):
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "mendpoint-bench", "version": "1.0.0"},
        }
        init = {"jsonrpc": "2.0", "id": CHECK_ID + i, "method": "initialize", "params": params}
        answer = post(url, init, None)
        result = answer.message.get("result") if isinstance(answer.message, dict) else None
        if answer.status != 200 or not isinstance(result, dict):
            raise RuntimeError(f"initialize: {answer.status} {answer.message!r}")
        session = answer.headers.get("Mcp-Session-Id") or answer.headers.get("mcp-session-id")
        if not session:
            raise RuntimeError("initialize: no Mcp-Session-Id in the answer")
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        done = post(url, note, session)
        if done.status != 202:
            raise RuntimeError(f"notifications/initialized: {done.status}, expected 202")
        sessions.append(session)
    return sessions


def check(system: str, url: str, session: str) -> str | None:
    """What is wrong with the sample calls (so a broken setup is never benchmarked), or None."""
    system = base_name(system)
    listed = post(url, {"jsonrpc": "2.0", "id": CHECK_ID, "method": "tools/list"}, session)
    tools = _result(listed).get("tools") or []
    if not any(isinstance(t, dict) and t.get("name") == TOOL for t in tools):
        return f"tools/list: no {TOOL}: {listed.message!r}"
    good = _result(_call(url, session, CHECK_ID + 1, ok_path(1)))
    if good.get("isError") or not str(good.get("content", [{}])[0].get("text")).startswith("Note"):
        return f"a successful call came back as {good!r}"
    bad = _result(_call(url, session, CHECK_ID + 3, missing_path(3)))
    content = bad.get("content") or [{}]
    if bad.get("isError") is not True or content[0].get("text") != enoent(missing_path(3)):
        return f"a failing call came back as {bad!r}"
    meta = bad.get("_meta") or {}
    if system not in UPGRADING:
        if FAILURE_META in meta or len(content) != 1:
            return f"{system} should pass the tool error untouched: {bad!r}"
        return None
    failure = meta.get(FAILURE_META) or {}
    if failure.get("error", {}).get("code") != "FILE_NOT_FOUND":
        return f"no FILE_NOT_FOUND under _meta[{FAILURE_META!r}]: {bad!r}"
    if meta.get(TOOL_FAILURE_META, {}).get("code") != "resource_not_found":
        return f"no resource_not_found under _meta[{TOOL_FAILURE_META!r}]: {bad!r}"
    if len(content) != 2 or "mendpoint_failure" not in json.loads(content[-1].get("text", "{}")):
        return f"no mendpoint_failure text item appended: {bad!r}"
    return None


def _call(url: str, session: str, rid: int, path: str) -> Answer:
    params = {"name": TOOL, "arguments": {"path": path}}
    return post(
        url, {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}, session
    )


def _result(answer: Answer) -> dict[str, Any]:
    message = answer.message
    if answer.status != 200 or not isinstance(message, dict):
        return {"status": answer.status, "message": message}
    result = message.get("result")
    return result if isinstance(result, dict) else {"message": message}


def unexpected(system: str, replies: dict[str, int]) -> int:
    """Replies of a load that the sample check would have refused: anything but a success or
    a tool error, and a tool error upgraded (or not) against what `system` does."""
    wrong_kind = "failed" if base_name(system) in UPGRADING else "upgraded"
    return replies.get("other", 0) + replies.get(wrong_kind, 0)


# --- load and measurement ----------------------------------------------------------------------


def wrk(url: str, conns: int, seconds: int, sessions: list[str]) -> McpLoad:
    """wrk pinned to the load core, `mcp.lua` rotating the calls over the sessions."""
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s", "-s", str(LUA)]
    data = harness.run_wrk([*argv, url, "--", *sessions], seconds)
    load = harness.load_of(data)
    replies = {k: int(data[k]) for k in ("ok", "failed", "upgraded", "other")}
    return McpLoad(load, replies)


@dataclass(frozen=True)
class Measured:
    load: harness.Load
    replies: dict[str, int]
    rss_mib: float | None
    cpu_us_per_request: float | None


def measure(
    system: str,
    conns: int,
    root: Path,
    seconds: int,
    warmup: int,
    command: Command | None,
) -> Measured:
    """One fresh system (and fresh server) under `conns` concurrent MCP clients; `command`
    starts it (None: `direct`, the server itself)."""
    server_port = free_port()
    upstream = f"http://127.0.0.1:{server_port}"
    server: subprocess.Popen[bytes] | None = None
    proc: subprocess.Popen[bytes] | None = None
    children: list[int] = []
    try:
        if system == "direct" or base_name(system) in BEHIND_HTTP:
            core = harness.SUT_CORE if system == "direct" else harness.LOAD_CORE
            server = _start_server(server_port, core, root / "mcp-server.log")
            harness.wait_ready(upstream + PATH, server)
        if command is None:
            sut, url = server, upstream + PATH
        else:
            port = free_port()
            argv = command(upstream, port, root)
            proc = sut = harness.start(argv, root / f"{system}.log")
            url = f"http://127.0.0.1:{port}{PATH}"
            harness.wait_ready(url, proc)
        assert sut is not None
        sessions = open_sessions(url, conns)
        problem = check(system, url, sessions[0])
        if problem is not None:
            raise RuntimeError(f"{system} on MCP: {problem}")
        # The stdio servers exist now (the bridge starts one per session): off the system core.
        children = _descendants(sut.pid) if sut is not server else []
        harness.repin(children, harness.LOAD_CORE)
        if warmup:
            wrk(url, conns, warmup, sessions)
        cpu_before = harness.cpu_seconds(sut.pid)
        result = wrk(url, conns, seconds, sessions)
        requests = max(result.load.requests, 1)
        cpu = (harness.cpu_seconds(sut.pid) - cpu_before) / requests * 1e6
        rss = harness.peak_rss_mib(sut.pid)
    finally:
        for running in (proc, server):
            if running is not None:
                harness.stop(running)
        _reap(children)
    return Measured(result.load, result.replies, rss, cpu)


def _start_server(port: int, core: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, str(SERVER), "--port", str(port)]
    with log.open("ab") as out:
        return subprocess.Popen(
            harness.pinned(core, argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (the bridge starts its children in sessions of their own)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _reap(pids: list[int]) -> None:
    """The stdio servers should be gone with their system; kill any that is not (by pid, and
    only if it is still our server: a pid can be reused)."""
    deadline = time.monotonic() + 5
    for pid in pids:
        while time.monotonic() < deadline and _is_server(pid):
            time.sleep(0.05)
        if _is_server(pid):
            os.kill(pid, signal.SIGKILL)


def _is_server(pid: int) -> bool:
    try:
        return str(SERVER).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
