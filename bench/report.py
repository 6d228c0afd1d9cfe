"""The markdown the benchmark prints: medians with their ratio to the bare proxy, then targets.

Absolute medians are shown so a reader can sanity-check the run, but every verdict is a
ratio between two medians of the same run.
"""

from __future__ import annotations

from typing import Any

from bench import mcp_bench
from bench.baseline import base_name, revision_of
from bench.ratios import LATENCY, TIMES, Medians, ratio
from bench.targets import targets_table

COLUMNS = (
    "direct",
    "bare",
    "bare-buffered",
    "mitmproxy",
    "mendpoint-original",
    "mendpoint-headers",
    "mendpoint-additive",
    "mendpoint-envelope",
    "mendpoint-additive[log-off]",
    "mendpoint-additive[log-off+followups-off]",
    "bare+log",
    "mendpoint-additive+trace",
    "mendpoint-additive+trace[exporter-own-core]",
    "mendpoint-additive+trace[ratio-0.1]",
)
# The MCP rows (bench/mcp_bench.py) have their own tables: other systems, ratios to direct.
MCP_COLUMNS = mcp_bench.SYSTEMS
MCP_NAMES = {
    "mendpoint-original": "original",
    "mendpoint-additive": "additive",
    "mendpoint-bridge": "bridge",
}


def _cell(workload: str, system: str, medians: Medians) -> str:
    mine = medians.get(workload, {}).get(system)
    base = medians.get(workload, {}).get("bare")
    if mine is None:
        return "—"
    key = "p50_ms" if workload in LATENCY else "rps"
    value = f"{mine[key]:.3f} ms" if key == "p50_ms" else f"{mine[key]:,.0f}/s"
    r = ratio(mine[key], base[key]) if base else None
    text = value if r is None else f"{value} ({r:.2f}{TIMES})"
    if workload == "10mb-32" and mine.get("rss_mib") is not None:
        rss_r = ratio(mine["rss_mib"], base["rss_mib"]) if base else None
        text += f", {mine['rss_mib']:.0f} MiB" + (f" ({rss_r:.2f}{TIMES})" if rss_r else "")
    return text


def _header(columns: list[str]) -> list[str]:
    header = "| workload | " + " | ".join(c.removeprefix("mendpoint-") for c in columns) + " |"
    return [header, "|---" * (len(columns) + 1) + "|"]


def is_mcp(workload: str) -> bool:
    return workload.startswith("mcp-")


def http_only(medians: Medians) -> Medians:
    return {w: by_system for w, by_system in medians.items() if not is_mcp(w)}


def mcp_only(medians: Medians) -> Medians:
    return {w: by_system for w, by_system in medians.items() if is_mcp(w)}


def _with_twins(order: tuple[str, ...], present: set[str]) -> list[str]:
    """`order`'s systems that are present, each followed by its baseline twins."""
    out: list[str] = []
    for system in order:
        if system in present:
            out.append(system)
        out += sorted(t for t in present if t != system and base_name(t) == system)
    return out


def _columns(medians: Medians) -> list[str]:
    present = {system for by_system in medians.values() for system in by_system}
    ordered = _with_twins(COLUMNS, present)
    return ordered + _with_twins(tuple(sorted(present - set(ordered))), present)


def table(medians: Medians) -> str:
    columns = _columns(medians)
    lines = _header(columns)
    for workload in medians:
        cells = [_cell(workload, c, medians) for c in columns]
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(medians: Medians) -> str:
    """CPU time the system under test spent per request: steadier than throughput on a
    shared machine, since time the process is not scheduled does not count."""
    columns = [c for c in _columns(medians) if c != "direct"]
    lines = _header(columns)
    for workload, by_system in medians.items():
        base = by_system.get("bare", {}).get("cpu_us_per_request")
        cells = []
        for system in columns:
            value = by_system.get(system, {}).get("cpu_us_per_request")
            r = ratio(value, base)
            cells.append(
                "—" if value is None else f"{value:.0f} µs" + (f" ({r:.2f}{TIMES})" if r else "")
            )
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mcp_columns(medians: Medians) -> list[str]:
    return _with_twins(MCP_COLUMNS, {s for by_system in medians.values() for s in by_system})


def _mcp_name(system: str) -> str:
    base = base_name(system)
    name = MCP_NAMES.get(base, base)
    rev = revision_of(system)
    return name if rev is None else f"{name}@{rev}"


def mcp_table(medians: Medians) -> str:
    """Round trips per second (ratio to direct) and p50 latency, for each MCP workload."""
    columns = _mcp_columns(medians)
    lines = [
        "| workload | " + " | ".join(_mcp_name(c) for c in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for workload, by_system in medians.items():
        base = by_system.get("direct", {})
        for key, label in (("rps", workload), ("p50_ms", f"{workload} p50")):
            cells = []
            for system in columns:
                mine = by_system.get(system)
                if mine is None:
                    cells.append("—")
                    continue
                value = f"{mine[key]:,.0f}/s" if key == "rps" else f"{mine[key]:.3f} ms"
                r = ratio(mine[key], base.get(key))
                cells.append(value if r is None else f"{value} ({r:.2f}{TIMES})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mcp_cpu_table(medians: Medians) -> str:
    """CPU per call of the process under test (for `direct`, the server's own), ratio to the
    bare proxy; and replies of the load that were not what the sample check expects."""
    columns = _mcp_columns(medians)
    lines = [
        "| workload | " + " | ".join(_mcp_name(c) for c in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for workload, by_system in medians.items():
        base = by_system.get("bare", {}).get("cpu_us_per_request")
        cells = []
        for system in columns:
            value = by_system.get(system, {}).get("cpu_us_per_request")
            r = ratio(value, base) if system != "direct" else None
            cells.append(
                "—" if value is None else f"{value:.0f} µs" + (f" ({r:.2f}{TIMES})" if r else "")
            )
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    wrong = {
        f"{w}/{s}": int(m["unexpected_replies"])
        for w, by_system in medians.items()
        for s, m in by_system.items()
        if m.get("unexpected_replies")
    }
    if wrong:
        lines.append("")
        lines.append(
            "Unexpected replies under load: " + ", ".join(f"{k} {v}" for k, v in wrong.items())
        )
    return "\n".join(lines)


def peers_table(medians: Medians) -> str:
    """Mendpoint beside the MCP gateways people would pick instead (bench/mcp_peers.py): calls
    per second, CPU per call, p50 / p99 at 1 and 16 clients, and what each answered for the
    failing call (bench/mcp_bench.failure_answer)."""
    lines = [
        "| system | calls/s, 1 / 16 clients | CPU per call, 1 / 16 | p50 / p99 ms, 1 client "
        "| p50 / p99 ms, 16 clients | the failing call |",
        "|---|---|---|---|---|---|",
    ]
    one, sixteen = medians.get("mcp-1", {}), medians.get("mcp-16", {})
    for system in [s for s in _mcp_columns(medians) if s not in ("direct", "bare")]:
        a, b = one.get(system, {}), sixteen.get(system, {})
        if not a and not b:
            continue
        lines.append(
            f"| {_mcp_name(system)} | {_pair(a, b, 'rps', '{:,.0f}')} "
            f"| {_pair(a, b, 'cpu_us_per_request', '{:.0f} µs')} "
            f"| {_pair(a, a, 'p50_ms', '{:.2f}', 'p99_ms')} "
            f"| {_pair(b, b, 'p50_ms', '{:.2f}', 'p99_ms')} "
            f"| {a.get('failure') or b.get('failure') or '—'} |"
        )
    return "\n".join(lines)


def _pair(a: dict[str, Any], b: dict[str, Any], key: str, form: str, key_b: str = "") -> str:
    def shown(m: dict[str, Any], k: str) -> str:
        return "—" if m.get(k) is None else form.format(m[k])

    return f"{shown(a, key)} / {shown(b, key_b or key)}"


def baseline_table(medians: Medians) -> str:
    """Each system against its baseline twin, workload by workload: the twin's median, this
    tree's, and their ratio (throughput, or p50 on the one-connection rows; CPU per request)."""
    lines = [
        "| workload | system | baseline → now | now / baseline | CPU baseline → now "
        "| now / baseline |",
        "|---|---|---|---|---|---|",
    ]
    for workload, by_system in medians.items():
        key = "p50_ms" if workload in LATENCY else "rps"
        for twin in sorted(s for s in by_system if revision_of(s) is not None):
            now, then = by_system.get(base_name(twin)), by_system[twin]
            if now is None:
                continue
            shown = _shown(key, then[key]) + " → " + _shown(key, now[key])
            r = ratio(now[key], then[key])
            cpu_then, cpu_now = then.get("cpu_us_per_request"), now.get("cpu_us_per_request")
            cpu = (
                "—" if cpu_then is None or cpu_now is None else f"{cpu_then:.0f} → {cpu_now:.0f} µs"
            )
            cpu_r = ratio(cpu_now, cpu_then)
            name = base_name(twin).removeprefix("mendpoint-")
            lines.append(
                f"| {workload} | {name} | {shown} | {_times(r)} | {cpu} | {_times(cpu_r)} |"
            )
    return "\n".join(lines)


def _shown(key: str, value: float) -> str:
    return f"{value:.3f} ms" if key == "p50_ms" else f"{value:,.0f}/s"


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}{TIMES}"


def rules_table(rules: dict[str, Any] | None) -> str:
    if not rules:
        return ""
    lines = ["| rules | classify one error (median) | ratio to 10 rules |", "|---|---|---|"]
    base = rules["median_us"]["10"]
    for count, value in rules["median_us"].items():
        lines.append(f"| {int(count):,} | {value:.1f} µs | {value / base:.2f}{TIMES} |")
    same = rules.get("same_prefix_median_us", {})
    for count, value in same.items():
        ratio_text = f"{value / same['10']:.2f}{TIMES}" if "10" in same else "—"
        label = f"{int(count):,}, all on one status and path prefix"
        lines.append(f"| {label} | {value:.1f} µs | {ratio_text} |")
    packs = rules.get("stack_packs_us", {})
    if "fallbacks" in packs and "with_stack_packs" in packs:
        alone, full = packs["fallbacks"], packs["with_stack_packs"]
        lines.append(f"| a 400 no stack pack knows, the fallbacks alone | {alone:.1f} µs | — |")
        ratio = f"{full / alone:.2f}{TIMES} of the fallbacks alone"
        lines.append(f"| the same 400, every stack pack in front | {full:.1f} µs | {ratio} |")
    return "\n".join(lines)


def latency_table(latency: dict[str, Any] | None) -> str:
    """The MCP latency rows (bench/mcp_latency.py): what each transport adds, against its
    target, median against median of the same run."""
    if not latency:
        return ""
    lines = [
        f"MCP latency (bench/mcp_latency.py): start-up over {latency['starts']} starts each, "
        f"calls over {latency['calls']} round trips each; milliseconds, median (p90).",
        "",
        "| row | server alone | through Mendpoint | added | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in latency["rows"].items():
        alone, through = row["direct"], row["through"]
        verdict = "yes" if row["met"] else "**no**"
        lines.append(
            f"| {name} | {alone['median_ms']:.3f} ({alone['p90_ms']:.3f}) "
            f"| {through['median_ms']:.3f} ({through['p90_ms']:.3f}) "
            f"| {row['added_ms']:+.3f} | ≤ {row['target_ms']:g} | {verdict} |"
        )
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    machine = results["machine"]
    s = results["settings"]
    parts = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"Linux {machine['kernel']}. Medians of {s['reps']} interleaved runs "
        f"{TIMES} {s['seconds']} s "
        f"(warm-up {s['warmup']} s); wrk on core 0, system under test on core 1.",
        "",
    ]
    http = http_only(results["medians"])
    if http:
        parts += [
            "Ratios are to the bare aiohttp proxy in the same run; 1-connection rows show p50 "
            "latency.",
            "",
            table(http),
            "",
            "CPU time of the system under test per request (median; ratio to bare):",
            "",
            cpu_table(http),
            "",
        ]
    mcp = mcp_only(results["medians"])
    if mcp:
        parts += [
            "MCP tools/call round trips, half of the calls failing (median; ratio to direct, the "
            "fast server alone). bridge and mcp-proxy both serve the stdio variant of the server "
            "(like for like); the others proxy its Streamable HTTP variant.",
            "",
            mcp_table(mcp),
            "",
            "CPU time of the process under test per call (median; for direct, the server's own; "
            "ratio to bare):",
            "",
            mcp_cpu_table(mcp),
            "",
            "The MCP gateways side by side (bench/mcp_peers.py): contextforge fronts the HTTP "
            "server as the additive route does; bridge, mcp-proxy, mcp-proxy-ts and "
            "supergateway run the stdio server.",
            "",
            peers_table(mcp),
            "",
        ]
    against = results.get("baseline")
    if against:
        parts += [
            f"Against `{against['label']}` (`--baseline {against['rev']}`): each Mendpoint "
            "system beside its twin on that commit's code, medians of the same interleaved "
            "run (throughput: higher is better; p50 and CPU: lower is better).",
            "",
            baseline_table(results["medians"]),
            "",
        ]
    parts += [rules_table(results.get("rule_scaling")), "", targets_table(results)]
    parts += ["", latency_table(results.get("mcp_latency"))]
    return "\n".join(parts)
