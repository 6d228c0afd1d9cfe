"""The MCP latency rows: what each transport adds to one call, and `mendpoint stdio` to start.

- **Start-up.** `initialize` is written the moment a process starts; the time to its answer is
  taken for the bare stdio server (`bench/mcp_server.py --stdio`) and for `mendpoint stdio --
  …` around the same server, alternately, `STARTS` times each (no config: what a host runs).
  An MCP host starts a stdio server per chat, so this is paid on every one.
- **Per call.** One session per transport, `CALLS` sequential `tools/call` round trips each of
  a success and a failure (the ENOENT text `builtin:mcp-defaults` upgrades), a call through
  the gateway alternating with one to the server alone, so drift on a shared machine falls on
  both. stdio and the bridge are measured against the stdio server spoken to directly (the
  bridge's figure includes the HTTP exchange the client makes); an MCP route (`type: mcp`,
  `upstream:`) against the Streamable HTTP variant of the server spoken to directly, by the
  same aiohttp client.

What is reported is the median (and p90) of each side and the difference of the medians:
what the gateway adds. `python -m bench.mcp_latency [--smoke] [--start-up]` prints the JSON
alone (`--start-up`: that row only). gateway/ is byte-compiled first, as an installed package
is: where PYTHONDONTWRITEBYTECODE is set, each `mendpoint stdio` would otherwise compile its
modules from source on every start, which no installed gateway does.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.mcp_server import PATH, PROTOCOL_VERSION, TOOL, missing_path, ok_path
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, str(ROOT / "bench" / "mcp_server.py")]
STDIO_SERVER = [*SERVER, "--stdio"]
MENDPOINT_STDIO = [sys.executable, "-m", "gateway", "--log-level", "warning", "stdio", "--"]
STARTS, CALLS = 20, 200
SMOKE_STARTS, SMOKE_CALLS = 2, 10
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "mendpoint-bench", "version": "1.0.0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TARGETS_MS = {
    "start-up": 150.0,
    "stdio success": 1.0,
    "stdio failure": 2.0,
    "bridge success": 2.0,
    "bridge failure": 3.0,
    "route success": 2.0,
    "route failure": 3.0,
}
"""What each row may add at most, median against median (docs/performance.md#mcp-latency)."""


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def call(n: int, failing: bool) -> dict[str, Any]:
    path = missing_path(n) if failing else ok_path(n)
    params = {"name": TOOL, "arguments": {"path": path}}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


@dataclass(frozen=True)
class Row:
    """One row: the server alone and through the gateway, in milliseconds."""

    name: str
    direct: list[float]
    through: list[float]

    def summary(self) -> dict[str, Any]:
        d, t = _stats(self.direct), _stats(self.through)
        added = t["median_ms"] - d["median_ms"]
        target = TARGETS_MS[self.name]
        return {
            "direct": d,
            "through": t,
            "added_ms": round(added, 3),
            "target_ms": target,
            "met": added <= target,
        }


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return {"median_ms": round(statistics.median(ordered), 3), "p90_ms": round(p90, 3)}


# --- start-up ------------------------------------------------------------------------------


async def first_answer_ms(argv: list[str]) -> float:
    """From starting `argv` to the answer to `initialize`, written at once."""
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(line(INIT))
        await process.stdin.drain()
        answer = await asyncio.wait_for(process.stdout.readline(), 60)
        took = (time.perf_counter() - began) * 1000
        if b'"result"' not in answer:
            raise RuntimeError(f"{argv}: no answer to initialize: {answer[:200]!r}")
        return took
    finally:
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            os.killpg(process.pid, 9)
            await process.wait()


async def start_up(starts: int) -> Row:
    direct: list[float] = []
    through: list[float] = []
    for n in range(starts):
        pair = [(direct, STDIO_SERVER), (through, [*MENDPOINT_STDIO, *STDIO_SERVER])]
        for out, argv in pair if n % 2 == 0 else pair[::-1]:
            out.append(await first_answer_ms(argv))
    return Row("start-up", direct, through)


# --- per call --------------------------------------------------------------------------------

Send = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class StdioPeer:
    """A stdio process spoken to line by line: the server itself, or `mendpoint stdio`."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, argv: list[str]) -> StdioPeer:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            limit=1 << 24,
        )
        peer = cls(process)
        await peer.send(INIT)
        assert process.stdin is not None
        process.stdin.write(line(INITIALIZED))
        return peer

    async def send(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line(message))
        await self.process.stdin.drain()
        answer: dict[str, Any] = json.loads(await self.process.stdout.readline())
        return answer

    async def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        await asyncio.wait_for(self.process.wait(), 30)


class HttpPeer:
    """A Streamable HTTP session, spoken to as an MCP client does (JSON or SSE answers)."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
        }

    async def open(self) -> HttpPeer:
        async with self.http.post(self.url, data=line(INIT), headers=self.headers) as answer:
            if answer.status != 200:
                raise RuntimeError(f"{self.url}: initialize: {answer.status}")
            self.headers["Mcp-Session-Id"] = answer.headers["Mcp-Session-Id"]
            await answer.read()
        async with self.http.post(self.url, data=line(INITIALIZED), headers=self.headers) as a:
            await a.read()
        return self

    async def send(self, message: dict[str, Any]) -> dict[str, Any]:
        async with self.http.post(self.url, data=line(message), headers=self.headers) as answer:
            body = await answer.read()
        if answer.content_type == "text/event-stream":
            body = body.rpartition(b"data: ")[2]
        found: dict[str, Any] = json.loads(body)
        return found


async def timed(send: Send, message: dict[str, Any], failing: bool) -> float:
    began = time.perf_counter()
    answer = await send(message)
    took = (time.perf_counter() - began) * 1000
    result = answer.get("result") or {}
    if bool(result.get("isError")) != failing:
        raise RuntimeError(f"tools/call {message['id']}: unexpected answer {answer!r}")
    return took


async def per_call(name: str, direct: Send, through: Send, calls: int) -> list[Row]:
    rows: list[Row] = []
    for failing, kind in ((False, "success"), (True, "failure")):
        alone: list[float] = []
        gateway: list[float] = []
        for n in range(1, calls + 1):
            message = call(n, failing)
            pair = [(alone, direct), (gateway, through)]
            for out, send in pair if n % 2 else pair[::-1]:
                out.append(await timed(send, message, failing))
        rows.append(Row(f"{name} {kind}", alone, gateway))
    return rows


def gateway_config(upstream: str) -> dict[str, Any]:
    """A bridge route and an MCP route, in the default mode, with the shipped rules."""
    return {
        "admin": None,
        "routes": [
            {"name": "bridge", "prefix": "/bridge", "type": "mcp", "command": STDIO_SERVER},
            {
                "name": "route",
                "prefix": "/route",
                "strip_prefix": True,
                "type": "mcp",
                "upstream": upstream,
            },
        ],
    }


async def _spawn(argv: list[str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(*argv, stderr=subprocess.DEVNULL)


async def wait_http(
    url: str, http: aiohttp.ClientSession, process: asyncio.subprocess.Process
) -> None:
    for _ in range(600):
        if process.returncode is not None:
            raise RuntimeError(f"{url}: its process exited with {process.returncode}")
        try:
            async with http.get(url) as answer:
                await answer.read()
                return
        except aiohttp.ClientError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


async def calls_rows(calls: int, root: Path) -> list[Row]:
    server_port, gateway_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{server_port}"
    config = root / "mcp-latency.yaml"
    config.write_text(json.dumps(gateway_config(upstream)))
    server = await _spawn([*SERVER, "--port", str(server_port)])
    serve = ["serve", "--config", str(config), "--listen", f"127.0.0.1:{gateway_port}"]
    gateway = await _spawn([sys.executable, "-m", "gateway", "--log-level", "warning", *serve])
    alone = await StdioPeer.start(STDIO_SERVER)
    wrapped = await StdioPeer.start([*MENDPOINT_STDIO, *STDIO_SERVER])
    try:
        async with aiohttp.ClientSession() as http:
            await wait_http(upstream + PATH, http, server)
            await wait_http(f"http://127.0.0.1:{gateway_port}/route{PATH}", http, gateway)
            direct_http = await HttpPeer(http, upstream + PATH).open()
            bridge = await HttpPeer(http, f"http://127.0.0.1:{gateway_port}/bridge").open()
            route = await HttpPeer(http, f"http://127.0.0.1:{gateway_port}/route{PATH}").open()
            rows = await per_call("stdio", alone.send, wrapped.send, calls)
            rows += await per_call("bridge", alone.send, bridge.send, calls)
            rows += await per_call("route", direct_http.send, route.send, calls)
    finally:
        await alone.stop()
        await wrapped.stop()
        for process in (gateway, server):
            process.terminate()
            await asyncio.wait_for(process.wait(), 30)
    return rows


async def measure(smoke: bool, start_up_only: bool = False) -> dict[str, Any]:
    starts, calls = (SMOKE_STARTS, SMOKE_CALLS) if smoke else (STARTS, CALLS)
    compileall.compile_dir(ROOT / "gateway", quiet=1)
    with tempfile.TemporaryDirectory(prefix="mendpoint-latency-") as tmp:
        rows = [await start_up(starts)]
        if not start_up_only:
            rows += await calls_rows(calls, Path(tmp))
    return {
        "starts": starts,
        "calls": calls,
        "rows": {row.name: row.summary() for row in rows},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--start-up", action="store_true", help="the start-up row only")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(args.smoke, args.start_up)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
