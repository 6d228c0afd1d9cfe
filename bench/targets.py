"""The targets `make bench` holds a run against (docs/performance.md#targets): this round's
(round four: the success, error and mixed paths against the bare proxy, the MCP route and the
bridge against the bare proxy and against every peer of bench/mcp_peers.py, p99, and no row
slower than its `--baseline` twin beyond the noise), then the earlier rounds' that no row of
this one replaces. Every figure is a ratio of medians of one run.
"""

from __future__ import annotations

from typing import Any

from bench.baseline import base_name, revision_of
from bench.ratios import ADDITIVE, LATENCY, TIMES, Medians, ratio
from bench.systems import FLEET, LOG_OFF, TRACED, TRACED_OWN_CORE, TRACED_TENTH

Target = tuple[str, str, str, float | None, bool | None]
"""(measure, where the issue started, target, this run's ratio, met? None: not measured)."""
Row = tuple[str, str, float | None, str, float]
BRIDGE = "mendpoint-bridge"
STDIO_PEERS = ("mcp-proxy", "mcp-proxy-ts", "supergateway")
NOISE = 0.9
"""About ±10 % in CPU per request on this shared machine: a row may fall this far before it
is called slower than its baseline twin."""


def get(medians: Medians, workload: str, system: str, key: str) -> float | None:
    value = medians.get(workload, {}).get(system, {}).get(key)
    return float(value) if value is not None else None


def targets(results: dict[str, Any]) -> list[Target]:
    """This round's rows: the headline Mendpoint rows run the shipped defaults."""
    m: Medians = results["medians"]

    def r(workload: str, system: str, base: str, key: str = "rps") -> float | None:
        return ratio(get(m, workload, system, key), get(m, workload, base, key))

    p99 = [r(w, ADDITIVE, "bare", "p99_ms") for w in ("ok-32", "error-32")]
    rows: list[Row] = [
        (
            "success, 32 connections, shipped defaults / bare",
            "0.79",
            r("ok-32", ADDITIVE, "bare"),
            ">=",
            0.9,
        ),
        (
            "error path, 32 connections, shipped defaults / bare",
            "0.48",
            r("error-32", ADDITIVE, "bare"),
            ">=",
            0.65,
        ),
        (
            "a realistic mix (95 % successes, 5 % errors), shipped defaults / bare",
            "0.78",
            r("mix-32", ADDITIVE, "bare"),
            ">=",
            0.9,
        ),
        (
            "MCP tools/call through an HTTP route / bare proxy, 16 clients",
            "0.46",
            r("mcp-16", ADDITIVE, "bare"),
            ">=",
            0.6,
        ),
        (
            "MCP tools/call through an HTTP route / bare proxy, 1 client",
            "0.65",
            r("mcp-1", ADDITIVE, "bare"),
            ">=",
            0.8,
        ),
        (
            "p99 latency, 32 connections, success and error (the worse), shipped defaults / bare",
            "—",
            _worst(p99, high_is_bad=True),
            "<=",
            1.2,
        ),
    ]
    for peer in ("mcp-proxy", "mcp-proxy-ts"):
        for workload, start in (("mcp-1", "1.44" if peer == "mcp-proxy" else "—"), ("mcp-16", "—")):
            clients = "1 client" if workload == "mcp-1" else "16 clients"
            name = f"MCP tools/call, Mendpoint bridge / {peer} (same stdio server), {clients}"
            rows.append((name, start, r(workload, BRIDGE, peer), ">=", 2))
    rows += peer_rows(m)
    rows.append(
        (
            "every row, now / --baseline (worse; throughput, or 1 / p50 on one connection)",
            "—",
            baseline_regression(m),
            ">=",
            NOISE,
        )
    )
    return [_verdict(name, start, value, op, limit) for name, start, value, op, limit in rows]


def peer_rows(m: Medians) -> list[Row]:
    """Calls per CPU-second against every peer, the worse of 1 and 16 clients: the MCP route
    against ContextForge (both in front of the HTTP server), the bridge against each stdio
    bridge (all running the stdio server)."""
    pairs = [(ADDITIVE, "contextforge", "Mendpoint MCP route")]
    pairs += [(BRIDGE, peer, "Mendpoint bridge") for peer in STDIO_PEERS]
    rows: list[Row] = []
    for mine, peer, label in pairs:
        per_cpu = [
            ratio(get(m, w, peer, "cpu_us_per_request"), get(m, w, mine, "cpu_us_per_request"))
            for w in ("mcp-1", "mcp-16")
        ]
        rows.append(
            (
                f"MCP calls per CPU-second, {label} / {peer} (the worse of 1 and 16 clients)",
                "—",
                _worst(per_cpu),
                ">=",
                2,
            )
        )
    return rows


def baseline_regression(m: Medians) -> float | None:
    """The worst of now / REV over every row a Mendpoint system has a `--baseline` twin on
    (throughput, or the inverse of p50 on a one-connection row): None without twins."""
    found: list[float | None] = []
    for workload, by_system in m.items():
        key = "p50_ms" if workload in LATENCY else "rps"
        for twin in (s for s in by_system if revision_of(s)):
            r = ratio(get(m, workload, base_name(twin), key), get(m, workload, twin, key))
            found.append(None if r is None else (1 / r if key == "p50_ms" else r))
    return _worst(found)


def _worst(values: list[float | None], high_is_bad: bool = False) -> float | None:
    """The worse of the figures, None if any is missing (a row not measured is not met)."""
    if not values or any(v is None for v in values):
        return None
    present = [v for v in values if v is not None]
    return max(present) if high_is_bad else min(present)


def _verdict(name: str, start: str, value: float | None, op: str, limit: float) -> Target:
    met = None if value is None or op == "measured" else _meets(value, op, limit)
    return (name, start if start == "—" else f"{start}{TIMES}", _target(op, limit), value, met)


def earlier_targets(results: dict[str, Any]) -> list[Target]:
    """The targets of the earlier rounds that no row above replaces, kept so a regression
    against them shows; the `[log-off]` column is what the earlier rounds measured."""
    m: Medians = results["medians"]
    add = ADDITIVE

    def r(workload: str, system: str, base: str, key: str = "rps") -> float | None:
        return ratio(get(m, workload, system, key), get(m, workload, base, key))

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
