"""Soak: mixed traffic through a gateway process for minutes, on loopback only (`make soak`).

32 concurrent workers (the benchmark's concurrency) send a fixed mix: successes, upstream
errors in every shape, a route whose upstream refuses connections, and MCP `tools/call`
requests (half of them tool errors). Every request carries its own id and every response is
checked against it, so a response mixed up between requests is caught, not just counted.

Pass criteria, printed with the figures at the end:
- zero errors the upstream did not cause (exceptions, unexpected statuses, malformed bodies);
- zero mismatched responses;
- gateway RSS growth after warm-up under `--rss-bound-mib`;
- file descriptors and asyncio tasks back to their idle baseline after the load stops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

REPO = Path(__file__).resolve().parents[2]
ERROR_STATUSES = (400, 401, 403, 404, 409, 422, 429, 500, 503)
MIX = ("ok",) * 10 + ("error",) * 6 + ("down",) + ("mcp",) * 3


# --- the upstream -----------------------------------------------------------------------------


async def ok(request: web.Request) -> web.Response:
    return web.Response(text=f"ok {request.query['id']}", content_type="text/plain")


async def error(request: web.Request) -> web.Response:
    status = int(request.match_info["status"])
    body = {"message": f"failure {status}", "soak_id": request.query["id"]}
    return web.json_response(body, status=status)


async def mcp(request: web.Request) -> web.Response:
    call = await request.json()
    failing = call["params"]["arguments"]["fail"]
    text = f"tool ran for {call['params']['arguments']['soak_id']}"
    result = {"content": [{"type": "text", "text": text}], "isError": failing}
    return web.json_response({"jsonrpc": "2.0", "id": call["id"], "result": result})


def upstream_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_post("/err/{status}", error)
    app.router.add_post("/mcp", mcp)
    return app


# --- the gateway process ------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def gateway_config(upstream: str) -> dict[str, Any]:
    return {
        "routes": [
            {"name": "api", "prefix": "/", "upstream": upstream, "mode": "additive"},
            {"name": "mcp", "prefix": "/mcp", "upstream": upstream, "type": "mcp"},
            {
                "name": "down",
                "prefix": "/down",
                "upstream": f"http://127.0.0.1:{closed_port()}",
                "mode": "envelope",
            },
        ],
        "limits": {"keepalive_timeout_s": 2},
        "log": {"access": False, "level": "warning"},
    }


@dataclass
class GatewayProcess:
    proc: asyncio.subprocess.Process
    url: str
    vitals: list[dict[str, int]] = field(default_factory=list)

    async def follow(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            with contextlib.suppress(ValueError):
                self.vitals.append(json.loads(line))

    @property
    def latest(self) -> dict[str, int]:
        return self.vitals[-1]


async def start_gateway(config_path: Path) -> GatewayProcess:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "tests" / "soak" / "gateway_proc.py"),
        str(config_path),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        env={"PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    first = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
    assert first[0] == "LISTEN", first
    return GatewayProcess(proc, f"http://{first[1]}:{first[2]}")


# --- the load -------------------------------------------------------------------------------


@dataclass
class Tally:
    sent: Counter[str] = field(default_factory=Counter)
    non_upstream_errors: Counter[str] = field(default_factory=Counter)
    mismatched: int = 0
    examples: list[str] = field(default_factory=list)

    def fail(self, kind: str, what: str) -> None:
        self.non_upstream_errors[kind] += 1
        if len(self.examples) < 10:
            self.examples.append(f"{kind}: {what}")

    def mismatch(self, what: str) -> None:
        self.mismatched += 1
        if len(self.examples) < 10:
            self.examples.append(f"mismatch: {what}")


async def one(session: aiohttp.ClientSession, base: str, kind: str, rid: str, tally: Tally) -> None:
    headers = {"X-Request-Id": rid}
    if kind == "ok":
        async with session.get(f"{base}/ok?id={rid}", headers=headers) as response:
            body = await response.read()
            if response.status != 200:
                tally.fail(kind, f"status {response.status}")
            elif body != f"ok {rid}".encode() or response.headers["X-Request-Id"] != rid:
                tally.mismatch(f"{rid} got {body[:60]!r}")
        return
    if kind == "error":
        status = ERROR_STATUSES[hash(rid) % len(ERROR_STATUSES)]
        async with session.post(f"{base}/err/{status}?id={rid}", headers=headers) as response:
            data = json.loads(await response.read())
            if response.status != status or "failure" not in data:
                tally.fail(kind, f"status {response.status} for {status}")
            elif data["soak_id"] != rid or data["error"]["request_id"] != rid:
                tally.mismatch(f"{rid} got soak_id={data.get('soak_id')}")
        return
    if kind == "down":
        async with session.get(f"{base}/down/x", headers=headers) as response:
            data = json.loads(await response.read())
            if response.status != 502 or data["error"]["code"] != "UPSTREAM_UNREACHABLE":
                tally.fail(kind, f"status {response.status}")
            elif data["error"]["request_id"] != rid:
                tally.mismatch(f"{rid} got {data['error']['request_id']}")
        return
    failing = hash(rid) % 2 == 0
    call_id: int | str = int(rid.rsplit("-", 1)[1]) if failing else rid
    call = {
        "jsonrpc": "2.0",
        "id": call_id,
        "method": "tools/call",
        "params": {"name": "soak.tool", "arguments": {"soak_id": rid, "fail": failing}},
    }
    async with session.post(f"{base}/mcp", json=call, headers=headers) as response:
        reply = json.loads(await response.read())
        result = reply.get("result", {})
        if response.status != 200 or result.get("isError") is not failing:
            tally.fail(kind, f"status {response.status}")
        elif reply["id"] != call_id or type(reply["id"]) is not type(call_id):
            tally.mismatch(f"{rid} got JSON-RPC id {reply['id']!r}")
        elif result["content"][0]["text"] != f"tool ran for {rid}":
            tally.mismatch(f"{rid} got {result['content'][0]['text'][:60]!r}")


async def worker(index: int, base: str, until: float, tally: Tally) -> None:
    kinds = itertools.cycle(MIX[index % len(MIX) :] + MIX[: index % len(MIX)])
    counter = itertools.count()
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < until:
            kind = next(kinds)
            rid = f"w{index}-{next(counter)}"
            tally.sent[kind] += 1
            try:
                await one(session, base, kind, rid, tally)
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
                tally.fail(kind, f"{type(exc).__name__}: {exc}")


async def soak(args: argparse.Namespace) -> int:
    runner = web.AppRunner(upstream_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "soak.yaml"
        config_path.write_text(yaml.safe_dump(gateway_config(f"http://127.0.0.1:{port}")))
        gateway = await start_gateway(config_path)
        follower = asyncio.create_task(gateway.follow())
        try:
            return await drive(gateway, args)
        finally:
            gateway.proc.terminate()
            await gateway.proc.wait()
            await follower
            await runner.cleanup()


async def drive(gateway: GatewayProcess, args: argparse.Namespace) -> int:
    await asyncio.sleep(2)
    idle = dict(gateway.latest)
    tally = Tally()
    started = time.monotonic()
    until = started + args.warmup + args.seconds
    workers = [
        asyncio.create_task(worker(i, gateway.url, until, tally)) for i in range(args.concurrency)
    ]
    await asyncio.sleep(args.warmup)
    warm = dict(gateway.latest)
    peak_rss = warm["rss"]
    while time.monotonic() < until:
        await asyncio.sleep(1)
        peak_rss = max(peak_rss, gateway.latest["rss"])
    await asyncio.gather(*workers)
    elapsed = time.monotonic() - started
    loaded = dict(gateway.latest)
    await asyncio.sleep(args.keepalive_wait)
    settled = dict(gateway.latest)
    total = sum(tally.sent.values())
    growth_mib = (settled["rss"] - warm["rss"]) / 2**20
    figures = {
        "seconds": round(elapsed, 1),
        "concurrency": args.concurrency,
        "requests": total,
        "requests_per_s": round(total / elapsed),
        "mix": dict(tally.sent),
        "non_upstream_errors": dict(tally.non_upstream_errors),
        "mismatched": tally.mismatched,
        "rss_idle_mib": round(idle["rss"] / 2**20, 1),
        "rss_after_warmup_mib": round(warm["rss"] / 2**20, 1),
        "rss_peak_mib": round(peak_rss / 2**20, 1),
        "rss_end_mib": round(settled["rss"] / 2**20, 1),
        "rss_growth_after_warmup_mib": round(growth_mib, 1),
        "fds_idle_loaded_end": [idle["fds"], loaded["fds"], settled["fds"]],
        "tasks_idle_loaded_end": [idle["tasks"], loaded["tasks"], settled["tasks"]],
        "connections_end": settled["connections"],
        "examples": tally.examples,
    }
    print(json.dumps(figures, indent=2))
    checks = {
        "zero non-upstream errors": not tally.non_upstream_errors,
        "zero mismatched responses": tally.mismatched == 0,
        f"RSS growth after warm-up < {args.rss_bound_mib} MiB": growth_mib < args.rss_bound_mib,
        "file descriptors back to baseline": settled["fds"] <= idle["fds"],
        "tasks back to baseline": settled["tasks"] <= idle["tasks"],
    }
    for name, passed in checks.items():
        print(f"{'PASS' if passed else 'FAIL'}  {name}")
    return 0 if all(checks.values()) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300, help="measured load after warm-up")
    parser.add_argument("--warmup", type=float, default=20)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rss-bound-mib", type=float, default=32)
    parser.add_argument("--keepalive-wait", type=float, default=6)
    sys.exit(asyncio.run(soak(parser.parse_args())))


if __name__ == "__main__":
    main()
