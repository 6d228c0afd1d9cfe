"""The markdown the benchmark prints: medians with their ratio to the bare proxy, then targets.

Absolute medians are shown so a reader can sanity-check the run, but every verdict is a
ratio between two medians of the same run.
"""

from __future__ import annotations

from typing import Any

from bench import mcp_bench
from bench.baseline import base_name, revision_of
from bench.systems import FLEET, LOG_OFF, TRACED, TRACED_OWN_CORE, TRACED_TENTH

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
LATENCY = ("ok-1", "error-1")
# The MCP rows (bench/mcp_bench.py) have their own tables: other systems, ratios to direct.
MCP_COLUMNS = mcp_bench.SYSTEMS
MCP_NAMES = {
    "mendpoint-original": "original",
    "mendpoint-additive": "additive",
    "mendpoint-bridge": "bridge",
}
ADDITIVE = "mendpoint-additive"
TIMES = "\u00d7"  # the multiplication sign, kept out of literals for the linter
Medians = dict[str, dict[str, dict[str, Any]]]


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


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


def _get(medians: Medians, workload: str, system: str, key: str) -> float | None:
    value = medians.get(workload, {}).get(system, {}).get(key)
    return float(value) if value is not None else None


Target = tuple[str, str, str, float | None, bool | None]


def targets(results: dict[str, Any]) -> list[Target]:
    """(measure, where the issue started, target, this run's ratio, met?) for every row of
    docs/performance.md#targets: the headline Mendpoint rows run the shipped defaults."""
    m: Medians = results["medians"]
    add = "mendpoint-additive"

    def r(workload: str, system: str, base: str, key: str = "rps") -> float | None:
        return ratio(_get(m, workload, system, key), _get(m, workload, base, key))

    p99 = [r(w, add, "bare", "p99_ms") for w in ("ok-32", "error-32")]
    rows: list[tuple[str, str, float | None, str, float]] = [
        (
            "success, 32 connections, shipped defaults / bare",
            "0.59",
            r("ok-32", add, "bare"),
            ">=",
            0.95,
        ),
        (
            "error path, 32 connections, shipped defaults / bare",
            "0.43",
            r("error-32", add, "bare"),
            ">=",
            0.8,
        ),
        (
            "MCP tools/call through an HTTP route / bare proxy, 16 clients",
            "0.62",
            r("mcp-16", add, "bare"),
            ">=",
            0.85,
        ),
        (
            "MCP tools/call through an HTTP route / bare proxy, 1 client",
            "0.71",
            r("mcp-1", add, "bare"),
            ">=",
            0.85,
        ),
        (
            "MCP tools/call, Mendpoint bridge / mcp-proxy (same stdio server), 1 client",
            "1.52",
            r("mcp-1", "mendpoint-bridge", "mcp-proxy"),
            ">=",
            2,
        ),
        (
            "a realistic mix (95 % successes, 5 % errors), shipped defaults / bare",
            "0.63",
            r("mix-32", add, "bare"),
            ">=",
            0.97,
        ),
        (
            "p99 latency, 32 connections, success and error (the worse), shipped defaults / bare",
            "—",
            None if None in p99 else max(x for x in p99 if x is not None),
            "<=",
            1.2,
        ),
    ]
    rows.append(
        (
            "success path, every other row (ok-1, 10mb-32, down-32), now / --baseline (worse)",
            "—",
            success_regression(m),
            ">=",
            0.9,
        )
    )
    out: list[Target] = []
    for name, start, value, op, limit in rows:
        met = None if value is None else _meets(value, op, limit)
        out.append(
            (name, start if start == "—" else f"{start}{TIMES}", _target(op, limit), value, met)
        )
    return out


# The success rows no target above names, held against the same gateway on --baseline's
# code: no regression beyond this machine's noise (about ±10 % in CPU per request).
OTHER_SUCCESS_ROWS = ("ok-1", "10mb-32", "down-32")


def success_regression(m: Medians) -> float | None:
    """The worst of additive now / additive@REV over the other success rows (throughput, or
    the inverse of p50 on a one-connection row): None without a baseline twin."""
    worst: float | None = None
    for workload in OTHER_SUCCESS_ROWS:
        by_system = m.get(workload, {})
        for twin in (s for s in by_system if revision_of(s) and base_name(s) == ADDITIVE):
            key = "p50_ms" if workload in LATENCY else "rps"
            now = _get(m, workload, ADDITIVE, key)
            r = ratio(now, _get(m, workload, twin, key))
            if r is not None and key == "p50_ms":
                r = 1 / r
            worst = r if worst is None or (r is not None and r < worst) else worst
    return worst


def earlier_targets(results: dict[str, Any]) -> list[Target]:
    """The targets of the earlier rounds that no row above replaces, kept so a regression
    against them shows; the `[log-off]` column is what the earlier rounds measured."""
    m: Medians = results["medians"]
    add = "mendpoint-additive"

    def r(workload: str, system: str, base: str, key: str = "rps") -> float | None:
        return ratio(_get(m, workload, system, key), _get(m, workload, base, key))

    rules = results.get("rule_scaling") or {}
    rows: list[tuple[str, float | None, str, float]] = [
        (
            "success throughput, 32 conns, access log off / bare",
            r("ok-32", LOG_OFF, "bare"),
            ">=",
            1.0,
        ),
        (
            "success throughput, 32 conns, additive / mitmproxy",
            r("ok-32", add, "mitmproxy"),
            ">=",
            8,
        ),
        (
            "success p50 latency, 1 conn, additive / bare",
            r("ok-1", add, "bare", "p50_ms"),
            "<=",
            1.2,
        ),
        ("10 MB throughput, 32 conns, additive / bare", r("10mb-32", add, "bare"), ">=", 0.9),
        ("10 MB peak RSS, additive / bare", r("10mb-32", add, "bare", "rss_mib"), "<=", 1.5),
        ("classification, 10,000 rules / 10 rules", rules.get("ratio_10000_to_10"), "<=", 1.5),
        # Traces (docs/operations.md#traces): the production setting, a tenth of successes
        # sampled and every failure kept, against tracing off; every trace sampled, measured.
        (
            "success throughput, traces at ratio 0.1 + failures kept / off",
            r("ok-32", TRACED_TENTH, add),
            ">=",
            0.9,
        ),
        (
            "95/5 mix throughput, traces at ratio 0.1 + failures kept / off",
            r("mix-32", TRACED_TENTH, add),
            ">=",
            0.9,
        ),
        (
            "error path throughput, traces at ratio 0.1 + failures kept / off",
            r("error-32", TRACED_TENTH, add),
            "measured",
            0,
        ),
        ("success throughput, traces at ratio 1.0 / off", r("ok-32", TRACED, add), "measured", 0),
        (
            "success throughput, traces at ratio 1.0, exporter off the gateway's core / off",
            r("ok-32", TRACED_OWN_CORE, add),
            "measured",
            0,
        ),
        # A fleet store (docs/operations.md#fleet): the success path unchanged within this
        # machine's noise (about ±10 %), the error path at least 0.9 times the store off.
        ("success throughput, fleet store on / off", r("ok-32", FLEET, add), ">=", 0.9),
        ("error path throughput, fleet store on / off", r("error-32", FLEET, add), ">=", 0.9),
    ]
    out: list[Target] = []
    for name, value, op, limit in rows:
        met = None if value is None or op == "measured" else _meets(value, op, limit)
        out.append((name, "—", _target(op, limit), value, met))
    return out


def _target(op: str, limit: float) -> str:
    if op == "measured":
        return "measured"
    sign = {">=": "≥", "<=": "≤", ">": ">"}[op]
    return f"{sign} {limit:g}{TIMES}"


def _meets(value: float, op: str, limit: float) -> bool:
    if op == ">":
        return value > limit
    return value >= limit if op == ">=" else value <= limit


def targets_table(results: dict[str, Any]) -> str:
    lines = [
        "| measure | issue's start | target | this run | met |",
        "|---|---|---|---|---|",
    ]
    for name, start, target, value, met in targets(results) + earlier_targets(results):
        shown = "not measured" if value is None else f"{value:.2f}{TIMES}"
        verdict = "n/a" if met is None else ("met" if met else "**not met**")
        lines.append(f"| {name} | {start} | {target} | {shown} | {verdict} |")
    return "\n".join(lines)


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
