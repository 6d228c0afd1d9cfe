"""The systems side by side, and the workloads each one runs.

A system is a command line that proxies 127.0.0.1:PORT to an upstream URL (or, for `direct`,
nothing: wrk talks to nginx itself). Each measurement starts a fresh process, so peak RSS
belongs to that one run and no run inherits another's warm state.
"""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import fixtures, mcp_bench, mcp_server
from bench.baseline import Baseline, base_name
from bench.harness import Reply
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
MITMDUMP = ROOT / ".venv" / "bench-mitm" / "bin" / "mitmdump"
MODES = ("original", "headers", "additive", "envelope")


@dataclass(frozen=True, eq=False)
class Workload:
    name: str
    path: str
    conns: int
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    dead_upstream: bool = False
    latency: bool = False
    mcp: bool = False  # MCP tools/call round trips (bench/mcp_bench.py), not wrk GETs to nginx
    # (path, nginx's status) of the requests wrk sends in turn, for a mixed workload; empty:
    # every request is to `path`.
    cycle: tuple[tuple[str, int], ...] = ()


WORKLOADS = (
    Workload("ok-32", fixtures.OK_PATH, 32, 200),
    Workload("ok-1", fixtures.OK_PATH, 1, 200, latency=True),
    Workload(
        "error-32",
        fixtures.ERROR_PATH,
        32,
        fixtures.ERROR_STATUS,
        {fixtures.API_KEY_HEADER: fixtures.API_KEY},
    ),
    Workload(
        "error-1",
        fixtures.ERROR_PATH,
        1,
        fixtures.ERROR_STATUS,
        {fixtures.API_KEY_HEADER: fixtures.API_KEY},
        latency=True,
    ),
    Workload("10mb-32", fixtures.BIG_PATH, 32, 200),
    Workload("down-32", fixtures.OK_PATH, 32, 502, dead_upstream=True),
    # 95 % successes, 5 % failures of five kinds (bench/fixtures.py), from one caller by key.
    Workload(
        "mix-32",
        fixtures.OK_PATH,
        32,
        200,
        {fixtures.API_KEY_HEADER: fixtures.API_KEY},
        cycle=tuple(fixtures.mix_paths()),
    ),
    # MCP tools/call at 1 and 16 concurrent clients (one session each), half of them failing.
    Workload("mcp-1", mcp_server.PATH, 1, 200, mcp=True),
    Workload("mcp-16", mcp_server.PATH, 16, 200, mcp=True),
)
MCP_ONLY = ("mendpoint-bridge", "mcp-proxy")
# The bridge's config sets max_sessions_per_address (its load opens every session from one
# address), a key a revision before it refuses: it gets no `@REV` twin.
UNTWINNED = ("mendpoint-bridge",)

Command = Callable[[str, int, Path], list[str]]


def bare(access_log: bool, buffered: bool = False) -> Command:
    """`buffered`: small known-length bodies read whole and answered in one write."""

    def command(upstream: str, port: int, _root: Path) -> list[str]:
        script = str(ROOT / "bench" / "bare_proxy.py")
        argv = [sys.executable, script, "--upstream", upstream, "--port", str(port)]
        argv += ["--access-log"] if access_log else []
        return argv + (["--buffer-small"] if buffered else [])

    return command


def mitm(upstream: str, port: int, root: Path) -> list[str]:
    return [
        str(MITMDUMP),
        "--mode",
        f"reverse:{upstream}",
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        str(port),
        "--quiet",
        "--set",
        f"confdir={root / 'mitm'}",
        "--set",
        "stream_large_bodies=1m",
        "--set",
        "connection_strategy=lazy",  # answer 502 when the upstream is down, not a reset
    ]


def mendpoint(
    mode: str,
    access_log: bool = True,
    env: tuple[str, ...] = (),
    followups: bool = True,
    fleet: bool = False,
    collector: str | None = None,
    sample_ratio: float = 1.0,
) -> Command:
    """A gateway of `fixtures.Variant` (the shipped defaults unless told otherwise); `env`
    (NAME=VALUE items) turns a lever off, for the A/B variants; `fleet`, a fleet store (a
    redis-server of the benchmark's own) on."""
    variant = fixtures.Variant(mode, access_log, followups, None, collector, sample_ratio)

    def command(upstream: str, port: int, root: Path) -> list[str]:
        store = fleet_store(root) if fleet else None
        config = fixtures.write_mendpoint_config(
            root, upstream, dataclasses.replace(variant, fleet=store)
        )
        listen = f"127.0.0.1:{port}"
        argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
        return [*(["env", *env] if env else []), *argv, "--listen", listen]

    return command


_STORE: list[subprocess.Popen[bytes]] = []


def fleet_store(root: Path) -> str:
    """One redis-server (Debian's) for the benchmark's `[fleet]` rows, stopped at exit."""
    port = 6391
    if not _STORE:
        server = shutil.which("redis-server") or "/usr/bin/redis-server"
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        _STORE.append(subprocess.Popen([*argv, "--appendonly", "no", "--dir", str(root)]))
        atexit.register(_STORE[0].terminate)
        time.sleep(0.5)
    return f"redis://127.0.0.1:{port}/0"


# What the shipped defaults cost: the same gateway with the access log off, and with
# follow-up tracking off as well. Measured by default, beside the headline rows.
LOG_OFF = "mendpoint-additive[log-off]"
LOG_AND_FOLLOWUPS_OFF = "mendpoint-additive[log-off+followups-off]"
COST_COLUMNS = (LOG_OFF, LOG_AND_FOLLOWUPS_OFF)
COST_WORKLOADS = ("ok-32", "error-32", "mix-32")
# Tracing on, exporting to bench/otlp_sink.py (started by bench/run.py), beside the same
# gateway with tracing off (docs/operations.md#traces): the production setting (a tenth of
# successes sampled, every failure kept) on the success, error and mixed workloads; every
# trace sampled (ratio 1.0) on the success path, with the exporter process on the gateway's
# core (it inherits the pin) and, in a second row, moved to the load generator's core.
TRACED = "mendpoint-additive+trace"
TRACED_TENTH = "mendpoint-additive+trace[ratio-0.1]"
TRACED_OWN_CORE = "mendpoint-additive+trace[exporter-own-core]"
TRACED_WORKLOADS = {
    TRACED: ("ok-32",),
    TRACED_OWN_CORE: ("ok-32",),
    TRACED_TENTH: ("ok-32", "error-32", "mix-32"),
}
EXPORTER_ELSEWHERE = (TRACED_OWN_CORE,)
MEASURED_BY_DEFAULT = (*COST_COLUMNS, TRACED_TENTH, TRACED_OWN_CORE)
"""The `[…]` systems the default plan measures; the other `[lever]` variants are named."""
"""Systems whose trace exporter process bench/run.py moves off the gateway's core."""
TRACE_SINK_PORT = free_port()


# Lever A/B variants: measured only when named with --systems (not in the default plan).
FOLLOWUPS_OFF = "mendpoint-additive[followups-off]"
FLEET = "mendpoint-additive[fleet]"
VARIANTS = {
    "mendpoint-additive[asyncio]": ("MENDPOINT_LOOP=asyncio",),
    "mendpoint-additive[gc-default]": ("MENDPOINT_GC=default",),
    "mendpoint-additive[no-levers]": ("MENDPOINT_LOOP=asyncio", "MENDPOINT_GC=default"),
}


def has_twin(system: str) -> bool:
    """Whether `--baseline REV` measures this system a second time as `system@REV`."""
    return system.startswith("mendpoint-") and system not in UNTWINNED


def systems(baseline: Baseline | None = None) -> dict[str, Command | None]:
    """Name → command; `direct` has none (wrk goes straight to nginx), nor have the MCP-only
    systems (bench/mcp_bench.py starts them). With a baseline, each Mendpoint system is
    followed by its twin on the baseline's code (bench/baseline.py)."""
    table: dict[str, Command | None] = {"direct": None, "bare": bare(False)}
    table["bare-buffered"] = bare(False, buffered=True)
    table["mitmproxy"] = mitm
    for mode in MODES:
        table[f"mendpoint-{mode}"] = mendpoint(mode)
    table["bare+log"] = bare(True)
    table[LOG_OFF] = mendpoint("additive", access_log=False)
    table[LOG_AND_FOLLOWUPS_OFF] = mendpoint("additive", access_log=False, followups=False)
    sink = f"http://127.0.0.1:{TRACE_SINK_PORT}"
    table[TRACED] = mendpoint("additive", collector=sink)
    table[TRACED_TENTH] = mendpoint("additive", collector=sink, sample_ratio=0.1)
    table[TRACED_OWN_CORE] = mendpoint("additive", collector=sink)
    for name, env in VARIANTS.items():
        table[name] = mendpoint("additive", env=env)
    table[FOLLOWUPS_OFF] = mendpoint("additive", followups=False)
    table[FLEET] = mendpoint("additive", fleet=True)
    for name in MCP_ONLY:
        table[name] = None  # MCP workloads only; their commands are in bench/mcp_bench.py
    if baseline is None:
        return table
    twinned: dict[str, Command | None] = {}
    for name, command in table.items():
        twinned[name] = command
        if has_twin(name):
            twinned[baseline.twin(name)] = None if command is None else baseline.wrap(command)
    return twinned


def applies(system: str, workload: Workload) -> bool:
    """Which pairs are measured: every mode where modes differ, one mode where they cannot;
    a baseline's twin wherever its system is."""
    system = base_name(system)
    if workload.mcp or system in MCP_ONLY:
        return workload.mcp and system in mcp_bench.SYSTEMS
    if system == "direct":
        return not workload.dead_upstream and not workload.cycle  # nginx's 444 is no answer
    if system in TRACED_WORKLOADS:
        return workload.name in TRACED_WORKLOADS[system]
    if system.endswith("+log"):
        return workload.name == "ok-32"
    if system in COST_COLUMNS:
        return workload.name in COST_WORKLOADS
    if workload.name == "10mb-32" and system.startswith("mendpoint-"):
        return system.split("[")[0] in ("mendpoint-additive", "mendpoint-original")
    return True


# What a proxy answers for each of the mix's failures, as nginx's status: 444 (nginx closed
# the connection without an answer) becomes a 502; the rest pass with their own status.
PROXIED_STATUS = {444: 502}
# Mendpoint's answer (additive and envelope) to each failure kind of the mix carries these.
MIX_MARKERS = {
    404: b'"code":"',
    422: b'"code":"',
    429: b'"retry_after_ms":2000',
    503: b'"retryable":true',
    444: b"UPSTREAM_",
}


def mix_check(system: str, path: str, status: int, reply: Reply) -> str | None:
    """What is wrong with one of the mix's sample replies, or None."""
    want = PROXIED_STATUS.get(status, status)
    if reply.status != want:
        return f"{path}: status {reply.status}, expected {want}"
    mode = base_name(system).removeprefix("mendpoint-").split("[")[0]
    marker = MIX_MARKERS.get(status)
    upgraded = base_name(system).startswith("mendpoint-") and mode in ("additive", "envelope")
    if upgraded and marker is not None and marker not in reply.body:
        return f"{path}: body lacks {marker!r}: {reply.body[:300]!r}"
    return None


def check(system: str, workload: Workload, reply: Reply) -> str | None:
    """What is wrong with a sample reply (so a broken setup is never benchmarked), or None."""
    if reply.status != workload.status:
        return f"status {reply.status}, expected {workload.status}"
    if workload.name == "10mb-32" and len(reply.body) != fixtures.BIG_BYTES:
        return f"body of {len(reply.body)} bytes, expected {fixtures.BIG_BYTES}"
    system = base_name(system)
    if not system.startswith("mendpoint-") or workload.status < 400:
        return None
    mode = system.removeprefix("mendpoint-").split("[")[0]
    marker = {
        ("error", "additive"): b'"available":true',
        ("error", "envelope"): b'"available":true',
        ("error", "original"): fixtures.ERROR_BODY.encode(),
        ("down", "additive"): b"UPSTREAM_UNREACHABLE",
        ("down", "envelope"): b"UPSTREAM_UNREACHABLE",
    }.get((workload.name.split("-")[0], mode))
    if marker is not None and marker not in reply.body:
        return f"body lacks {marker!r}: {reply.body[:200]!r}"
    if mode == "headers" and "X-Error-Code" not in reply.headers:
        return "no X-Error-Code header in headers mode"
    return None
