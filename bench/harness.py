"""Processes and load: start a pinned system, wait until it answers, run wrk, read peak RSS.

Every process is pinned with `taskset` (load generator and upstream on one core, the system
under test on the other) so the two never steal each other's time slices, and every run is
bounded: wrk has a fixed duration and every wait has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOAD_CORE = 0
SUT_CORE = 1
HERE = Path(__file__).resolve().parent
LUA = HERE / "report.lua"
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Load:
    """One wrk run's outcome."""

    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    socket_errors: int
    non_2xx: int


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def pinned(core: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *argv]


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start a system under test on its own core, in its own session (so it can be ended)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            pinned(SUT_CORE, argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s: only this process's own group is signalled."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def fetch(url: str, headers: dict[str, str] | None = None, timeout: float = 10.0) -> Reply:
    """One request without raising on 4xx/5xx."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, dict(response.headers.items()), response.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, dict(exc.headers.items()), exc.read())


def wait_ready(url: str, proc: subprocess.Popen[bytes] | None) -> None:
    """Until the system answers anything at all (a 502 from a dead upstream counts)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"system exited with {proc.returncode} before answering")
        try:
            fetch(url, timeout=2.0)
            return
        except (OSError, urllib.error.URLError):
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {READY_TIMEOUT_S:.0f} s")


def wrk(url: str, conns: int, seconds: int, headers: dict[str, str], script: Path = LUA) -> Load:
    """wrk pinned to the load core; one thread (one core) for up to `seconds`. `script`:
    the Lua file (report.lua's hook, and for a mix its request cycle: `cycle_script`)."""
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s", "-s", str(script)]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    return load_of(run_wrk([*argv, url], seconds))


def cycle_script(directory: Path, paths: list[str]) -> Path:
    """A wrk script that sends `paths` in turn, over and over, with report.lua's hook."""
    listed = ",".join(json.dumps(p) for p in paths)  # a JSON string is a Lua string here
    cycle = (
        f"local paths = {{{listed}}}\n"
        "local i = 0\n"
        "request = function()\n"
        "  i = i % #paths + 1\n"
        "  return wrk.format(nil, paths[i])\n"
        "end\n"
    )
    script = directory / "cycle.lua"
    script.write_text(cycle + LUA.read_text())
    return script


def run_wrk(argv: list[str], seconds: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a wrk command line on the load core; the JSON its Lua `done` hook printed. `env`:
    more environment, for the Lua script."""
    done = subprocess.run(
        pinned(LOAD_CORE, argv),
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        env=None if env is None else {**os.environ, **env},
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no result: {done.stdout[-500:]} {done.stderr[-500:]}")
    data: dict[str, Any] = json.loads(line.removeprefix("BENCH_JSON "))
    return data


def load_of(data: dict[str, Any]) -> Load:
    """The measures every Lua script reports, as a `Load`."""
    errors = data["connect"] + data["read"] + data["write"] + data["timeout"]
    return Load(
        rps=data["requests"] / (data["duration_us"] / 1e6),
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        requests=data["requests"],
        socket_errors=errors,
        non_2xx=data["status"],
    )


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM (the process's peak resident set) in MiB, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process and its live children have used so far (all their
    threads): a gateway's trace exporter process is part of what a traced request costs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    own = ticks / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(child) for child in _children(pid))


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def children_named(pid: int, word: str) -> list[int]:
    """The live children of `pid` whose command line holds `word` (a gateway's trace
    exporter process: `span_export`)."""
    found = []
    for child in _children(pid):
        with contextlib.suppress(OSError):
            if word.encode() in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
    return found


def repin(pids: list[int], core: int) -> None:
    """Move already running processes (nginx's) to a core."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", str(core), str(pid)], capture_output=True)
