"""The MCP rows of the benchmark, without load: the fast server's answers, the gateway config
it is measured with (it must keep loading as the config schema moves), the failing call
classified the way the sample check expects, and the report's MCP tables and targets.
`make bench-smoke` runs the whole thing end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import mcp_bench, mcp_peers, mcp_server, ratios, report, targets
from bench.systems import WORKLOADS, applies, systems
from gateway.classify import Classifier, Observation, ObservationKind
from gateway.config.loader import load_config


def call(n: int, path: str) -> dict[str, Any]:
    params = {"name": mcp_server.TOOL, "arguments": {"path": path}}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def test_half_of_the_calls_fail_with_the_filesystem_servers_text() -> None:
    good = mcp_server.answer(call(2, mcp_server.ok_path(2)))
    bad = mcp_server.answer(call(3, mcp_server.missing_path(3)))
    assert good is not None and bad is not None
    assert "isError" not in good["result"]
    assert bad["result"]["isError"] is True
    assert bad["result"]["content"][0]["text"] == mcp_server.enoent(mcp_server.missing_path(3))
    assert mcp_server.answer({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None


@pytest.mark.parametrize("upstream", ["http://127.0.0.1:9", None])
def test_the_bench_config_loads_and_classifies_the_failure(
    tmp_path: Path, upstream: str | None
) -> None:
    path = tmp_path / "mendpoint.yaml"
    path.write_text(json.dumps(mcp_bench.mendpoint_config(upstream, "additive")))
    loaded = load_config(str(path))
    route = loaded.config.routes[0]
    assert route.type == "mcp"
    assert (route.command is None) == (upstream is not None)
    text = mcp_server.enoent(mcp_server.missing_path(3))
    obs = Observation(
        route="tools",
        method="POST",
        path="/mcp",
        kind=ObservationKind.TOOL_ERROR,
        body=text.encode(),
        content_type="text/plain",
        tool=mcp_server.TOOL,
    )
    verdict = Classifier(loaded).classify(obs)
    assert verdict is not None and verdict.failure.code == "FILE_NOT_FOUND"


def test_mcp_workloads_run_only_the_mcp_systems() -> None:
    mcp = [w for w in WORKLOADS if w.mcp]
    http = [w for w in WORKLOADS if not w.mcp]
    assert [w.name for w in mcp] == ["mcp-1", "mcp-16"]
    for name in systems():
        assert all(applies(name, w) == (name in mcp_bench.SYSTEMS) for w in mcp)
        if name in ("mendpoint-bridge", *mcp_bench.PEERS):
            assert not any(applies(name, w) for w in http)
    started_elsewhere = {"direct", *mcp_peers.STARTERS}  # the peers start themselves
    assert set(mcp_bench.commands(systems())) == set(mcp_bench.SYSTEMS) - started_elsewhere
    assert {"contextforge", "mcp-proxy-ts", "supergateway"} <= set(mcp_bench.SYSTEMS)


def test_unexpected_replies_depend_on_whether_the_system_upgrades() -> None:
    replies = {"ok": 10, "failed": 10, "upgraded": 0, "other": 1}
    assert mcp_bench.unexpected("mcp-proxy", replies) == 1
    assert mcp_bench.unexpected("mendpoint-additive", replies) == 11


def test_report_shows_the_mcp_rows_and_targets() -> None:
    def row(rps: float, cpu: float | None, failure: str = "passed through") -> dict[str, Any]:
        return {
            "rps": rps,
            "p50_ms": 1.0,
            "p99_ms": 3.0,
            "cpu_us_per_request": cpu,
            "unexpected_replies": 0,
            "failure": failure,
        }

    by_system = {
        "direct": row(4000, 200),
        "bare": row(1500, 450),
        "mendpoint-additive": row(1200, 600, "upgraded"),
        "mendpoint-bridge": row(1000, 700, "upgraded"),
        "mcp-proxy": row(500, 1600),
        "mcp-proxy-ts": row(700, 1300),
        "supergateway": row(300, 2100, 'changed: {"status": 500}'),
        "contextforge": row(200, 5000),
    }
    results: dict[str, Any] = {
        "machine": {"cpu": "x", "cores": 2, "python": "3.11", "kernel": "6"},
        "settings": {"reps": 1, "seconds": 1, "warmup": 0},
        "medians": {"mcp-1": by_system, "mcp-16": by_system},
        "rule_scaling": None,
    }
    text = report.markdown(results).replace(ratios.TIMES, "x")
    assert "| mcp-16 | 4,000/s (1.00x) | 1,500/s (0.38x) | 1,200/s (0.30x)" in text
    assert "| mcp-16 | 200 µs | 450 µs (1.00x) | 600 µs (1.33x)" in text
    assert "| workload | direct | bare | mitmproxy" not in text  # no HTTP rows were measured
    assert "| contextforge | 200 / 200 | 5000 µs / 5000 µs | 1.00 / 3.00 | 1.00 / 3.00 " in text
    assert (
        "| bridge | 1,000 / 1,000 | 700 µs / 700 µs | 1.00 / 3.00 | 1.00 / 3.00 | upgraded |"
        in (text)
    )
    changed = '| 1.00 / 3.00 | 1.00 / 3.00 | changed: {"status": 500} |'
    assert "| supergateway | 300 / 300 | 2100 µs / 2100 µs " + changed in text
    rows = {name: (value, met) for name, _, _, value, met in targets.targets(results)}
    assert rows["MCP tools/call through an HTTP route / bare proxy, 16 clients"][1] is True
    bridge = "MCP tools/call, Mendpoint bridge / mcp-proxy (same stdio server), 1 client"
    assert rows[bridge][1] is True
    ts = "MCP tools/call, Mendpoint bridge / mcp-proxy-ts (same stdio server), 16 clients"
    assert rows[ts][0] == pytest.approx(1000 / 700) and rows[ts][1] is False
    forge = "MCP calls per CPU-second, Mendpoint MCP route / contextforge"
    value, met = next(v for k, v in rows.items() if k.startswith(forge))
    assert value == pytest.approx(5000 / 600) and met is True
    # A peer not measured is a row not met, never a row skipped.
    del by_system["supergateway"]
    rows = {name: (value, met) for name, _, _, value, met in targets.targets(results)}
    gateway = "MCP calls per CPU-second, Mendpoint bridge / supergateway"
    assert next(v for k, v in rows.items() if k.startswith(gateway)) == (None, None)
    assert "| a realistic mix (95 % successes, 5 % errors), shipped defaults / bare" in text
