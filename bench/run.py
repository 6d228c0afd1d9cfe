"""`make bench`: every system on every workload, interleaved, then medians and ratios.

Repetitions are interleaved (A B C … A B C …, the order rotated each round) so drift on a
shared machine spreads over every system instead of landing on one. Ratios are only ever
taken between medians of this one run; absolute numbers describe this machine, nothing more.
`--baseline REV` adds every Mendpoint system again on REV's code (`mendpoint-additive@REV`,
bench/baseline.py), interleaved with the rest, and a table of now against REV.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import harness, mcp_bench, mcp_latency, report
from bench.baseline import Baseline, base_name, prepare
from bench.systems import (
    EXPORTER_ELSEWHERE,
    MEASURED_BY_DEFAULT,
    ROOT,
    TRACE_SINK_PORT,
    TRACED,
    Workload,
    applies,
    check,
    mix_check,
    systems,
)
from bench.systems import WORKLOADS as ALL_WORKLOADS
from bench.upstream import Nginx, OtlpSink
from tests.support.ports import free_port

# What --workloads can name beside the load workloads: the rule microbenchmark and the MCP
# start-up and per-call latency rows (bench/rules_scaling.py, bench/mcp_latency.py).
RULES_ROW, LATENCY_ROWS = "rules", "mcp-latency"
EXTRA_ROWS = (RULES_ROW, LATENCY_ROWS)


@dataclass(frozen=True)
class Sample:
    system: str
    workload: str
    rep: int
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    socket_errors: int
    non_2xx: int
    rss_mib: float | None
    cpu_us_per_request: float | None
    # MCP rows: the load's replies by kind (ok, failed, upgraded, other; bench/mcp.lua), and
    # what the system answered for the failing call (bench/mcp_bench.failure_answer).
    replies: dict[str, int] | None = None
    failure: str | None = None


@dataclass(frozen=True)
class Settings:
    reps: int
    seconds: int
    warmup: int
    root: Path
    baseline: Baseline | None = None


def measure(name: str, workload: Workload, rep: int, nginx: Nginx, settings: Settings) -> Sample:
    """One fresh process of `name` under `workload`: ready, checked, warmed, loaded."""
    table = systems(settings.baseline)
    if workload.mcp:
        mcp_command = mcp_bench.commands(table, settings.baseline).get(name)
        m = mcp_bench.measure(
            name, workload.conns, settings.root, settings.seconds, settings.warmup, mcp_command
        )
        fields = _load_fields(m.load)
        return Sample(
            name,
            workload.name,
            rep,
            **fields,
            rss_mib=m.rss_mib,
            cpu_us_per_request=m.cpu_us_per_request,
            replies=m.replies,
            failure=m.failure,
        )
    command = table[name]
    if command is None:
        return _measure_direct(workload, rep, nginx, settings)
    port = free_port()
    upstream = f"http://127.0.0.1:{free_port()}" if workload.dead_upstream else nginx.url
    url = f"http://127.0.0.1:{port}{workload.path}"
    script = _script(workload, settings.root)
    proc = harness.start(command(upstream, port, settings.root), settings.root / f"{name}.log")
    try:
        harness.wait_ready(url, proc)
        if base_name(name) in EXPORTER_ELSEWHERE:
            harness.repin(harness.children_named(proc.pid, "span_export"), harness.LOAD_CORE)
        _verify(name, workload, url)
        if settings.warmup:
            harness.wrk(url, workload.conns, settings.warmup, workload.headers, script)
        cpu_before = harness.cpu_seconds(proc.pid)
        load = harness.wrk(url, workload.conns, settings.seconds, workload.headers, script)
        cpu = (harness.cpu_seconds(proc.pid) - cpu_before) / max(load.requests, 1) * 1e6
        rss = harness.peak_rss_mib(proc.pid)
    finally:
        harness.stop(proc)
    return Sample(
        name, workload.name, rep, **_load_fields(load), rss_mib=rss, cpu_us_per_request=cpu
    )


def _measure_direct(workload: Workload, rep: int, nginx: Nginx, settings: Settings) -> Sample:
    url = nginx.url + workload.path
    nginx.pin(harness.SUT_CORE)
    try:
        _verify("direct", workload, url)
        if settings.warmup:
            harness.wrk(url, workload.conns, settings.warmup, workload.headers)
        load = harness.wrk(url, workload.conns, settings.seconds, workload.headers)
    finally:
        nginx.pin(harness.LOAD_CORE)
    fields = _load_fields(load)
    return Sample("direct", workload.name, rep, **fields, rss_mib=None, cpu_us_per_request=None)


def _script(workload: Workload, root: Path) -> Path:
    """The wrk script: report.lua's hook, with the request cycle of a mixed workload."""
    if not workload.cycle:
        return harness.LUA
    return harness.cycle_script(root, [path for path, _ in workload.cycle])


def _load_fields(load: harness.Load) -> dict[str, Any]:
    return asdict(load)


def _verify(name: str, workload: Workload, url: str) -> None:
    problem = check(name, workload, harness.fetch(url, workload.headers))
    base = url.removesuffix(workload.path)
    for path, status in dict.fromkeys(workload.cycle):
        problem = problem or mix_check(
            name, path, status, harness.fetch(base + path, workload.headers)
        )
    if problem is not None:
        raise RuntimeError(f"{name} on {workload.name}: {problem}")


def plan(
    selected: list[str] | None,
    workloads: list[Workload],
    against: Baseline | None = None,
) -> list[tuple[str, Workload]]:
    """The (system, workload) pairs to measure: the selected systems (by default all but the
    `[lever]` variants, the cost columns included), each Mendpoint one followed by its twin
    when there is a baseline."""
    names = [
        n
        for n in systems(against)
        if (
            base_name(n) in selected
            if selected
            else "[" not in n or base_name(n) in MEASURED_BY_DEFAULT
        )
    ]
    return [(n, w) for w in workloads for n in names if applies(n, w)]


def run_all(pairs: list[tuple[str, Workload]], nginx: Nginx, settings: Settings) -> list[Sample]:
    """Interleaved rounds; within a workload the system order rotates every round."""
    samples: list[Sample] = []
    for rep in range(settings.reps):
        for workload in dict.fromkeys(w for _, w in pairs):
            names = [n for n, w in pairs if w is workload]
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                sample = measure(name, workload, rep, nginx, settings)
                print(_progress(sample), file=sys.stderr, flush=True)
                samples.append(sample)
    return samples


def _progress(s: Sample) -> str:
    rss = f" rss={s.rss_mib:.0f}MiB" if s.rss_mib is not None else ""
    rss += f" cpu={s.cpu_us_per_request:.0f}us/req" if s.cpu_us_per_request is not None else ""
    if s.replies is not None:
        rss += " replies=" + ",".join(f"{k}:{v}" for k, v in s.replies.items())
    return (
        f"  [{s.rep}] {s.workload:9} {s.system:20} {s.rps:10.0f} req/s  p50={s.p50_ms:.3f}ms"
        f"{rss} errors={s.socket_errors}"
    )


def rule_scaling(smoke: bool) -> dict[str, Any]:
    """The classification microbenchmark, in its own process on the system-under-test core."""
    argv = [sys.executable, "-m", "bench.rules_scaling"] + (["--smoke"] if smoke else [])
    done = subprocess.run(
        harness.pinned(harness.SUT_CORE, argv),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    if done.returncode != 0:
        print(f"rule scaling failed: {done.stderr[-2000:]}", file=sys.stderr)
        return {}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def machine() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="1 repetition of 1 s, no warm-up")
    parser.add_argument("--systems", help="comma-separated subset of systems")
    parser.add_argument(
        "--workloads",
        help="comma-separated subset of workloads; with it the rule microbenchmark and the MCP "
        f"latency rows run only if named ({RULES_ROW}, {LATENCY_ROWS})",
    )
    parser.add_argument("--no-rules", action="store_true", help="skip the rule microbenchmark")
    parser.add_argument(
        "--no-latency", action="store_true", help="skip the MCP start-up and per-call rows"
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run every Mendpoint system on REV's code (a git worktree in bench/results/)",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    if args.smoke:
        args.reps, args.seconds, args.warmup = 1, 1, 0
    selected = args.systems.split(",") if args.systems else None
    wanted = set(args.workloads.split(",")) if args.workloads else None
    unknown = (wanted or set()) - {w.name for w in ALL_WORKLOADS} - set(EXTRA_ROWS)
    if unknown:
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    workloads = [w for w in ALL_WORKLOADS if wanted is None or w.name in wanted]
    # --workloads names what runs: the microbenchmark and the MCP latency rows only if named.
    args.no_rules = args.no_rules or (wanted is not None and RULES_ROW not in wanted)
    args.no_latency = args.no_latency or (wanted is not None and LATENCY_ROWS not in wanted)
    against = prepare(args.baseline) if args.baseline else None
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="mendpoint-bench-") as tmp:
        settings = Settings(args.reps, args.seconds, args.warmup, Path(tmp), against)
        pairs = plan(selected, workloads, against)
        traced = any(name.startswith(TRACED) for name, _ in pairs)
        with (
            Nginx(Path(tmp), free_port()) as nginx,
            OtlpSink(Path(tmp), TRACE_SINK_PORT) if traced else contextlib.nullcontext() as sink,
        ):
            samples = run_all(pairs, nginx, settings)
            if sink is not None and sink.exports() == 0:
                raise RuntimeError(f"{TRACED} exported no spans: the tracing row measured nothing")
    rules = None if args.no_rules else rule_scaling(args.smoke)
    latency = None if args.no_latency else asyncio.run(mcp_latency.measure(args.smoke))
    results = {
        "machine": machine(),
        "settings": {"reps": args.reps, "seconds": args.seconds, "warmup": args.warmup},
        "command": " ".join(["python -m bench.run", *(argv or sys.argv[1:])]),
        "elapsed_s": round(time.time() - started, 1),
        "baseline": None
        if against is None
        else {"rev": args.baseline, "commit": against.commit, "label": against.label},
        "samples": [asdict(s) for s in samples],
        "medians": medians(samples),
        "rule_scaling": rules,
        "mcp_latency": latency,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / time.strftime("bench-%Y%m%d-%H%M%S.json")
    path.write_text(json.dumps(results, indent=1))
    print(report.markdown(results))
    print(f"\nresults: {path}", file=sys.stderr)
    return 0


def medians(samples: list[Sample]) -> dict[str, dict[str, dict[str, float | str | None]]]:
    """workload → system → median of each measure over the repetitions (and, for an MCP row,
    what the failing call was answered)."""
    out: dict[str, dict[str, dict[str, float | str | None]]] = {}
    for s in samples:
        out.setdefault(s.workload, {}).setdefault(s.system, {})
    for workload, by_system in out.items():
        for system in by_system:
            mine = [s for s in samples if s.workload == workload and s.system == system]
            rss = [s.rss_mib for s in mine if s.rss_mib is not None]
            cpu = [s.cpu_us_per_request for s in mine if s.cpu_us_per_request is not None]
            by_system[system] = {
                "rps": statistics.median(s.rps for s in mine),
                "p50_ms": statistics.median(s.p50_ms for s in mine),
                "p99_ms": statistics.median(s.p99_ms for s in mine),
                "rss_mib": statistics.median(rss) if rss else None,
                "cpu_us_per_request": statistics.median(cpu) if cpu else None,
                "socket_errors": sum(s.socket_errors for s in mine),
            }
            if any(s.replies is not None for s in mine):
                by_system[system]["unexpected_replies"] = sum(
                    mcp_bench.unexpected(system, s.replies) for s in mine if s.replies
                )
            answers = Counter(s.failure for s in mine if s.failure is not None)
            if answers:  # what it answered for the failing call, as most runs saw it
                by_system[system]["failure"] = answers.most_common(1)[0][0]
    return out


if __name__ == "__main__":
    sys.exit(main())
