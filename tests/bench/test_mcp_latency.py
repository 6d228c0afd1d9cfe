"""The MCP latency rows (bench/mcp_latency.py): what is added, against which target."""

from __future__ import annotations

from bench import report
from bench.mcp_latency import TARGETS_MS, Row, gateway_config


def test_a_row_reports_medians_p90_and_what_the_gateway_adds() -> None:
    row = Row("stdio success", [0.2] * 9 + [5.0], [0.5] * 9 + [9.0]).summary()
    assert row["direct"] == {"median_ms": 0.2, "p90_ms": 5.0}
    assert row["through"] == {"median_ms": 0.5, "p90_ms": 9.0}
    assert row["added_ms"] == 0.3
    assert row["met"] is True
    slow = Row("start-up", [250.0], [420.0]).summary()
    assert slow["added_ms"] == 170.0 and slow["target_ms"] == 150.0 and slow["met"] is False


def test_every_row_has_a_target_and_the_table_says_whether_it_is_met() -> None:
    names = ["start-up"] + [
        f"{t} {k}" for t in ("stdio", "bridge", "route") for k in ("success", "failure")
    ]
    assert sorted(TARGETS_MS) == sorted(names)
    rows = {name: Row(name, [1.0], [1.0 + TARGETS_MS[name] * 2]).summary() for name in names}
    rows["stdio success"] = Row("stdio success", [1.0], [1.5]).summary()
    table = report.latency_table({"starts": 20, "calls": 200, "rows": rows})
    assert table.count("| **no** |") == len(names) - 1
    assert "| stdio success | 1.000 (1.000) | 1.500 (1.500) | +0.500 | ≤ 1 | yes |" in table


def test_the_gateway_config_has_a_bridge_and_a_route() -> None:
    routes = gateway_config("http://127.0.0.1:9")["routes"]
    assert [r["name"] for r in routes] == ["bridge", "route"]
    assert "command" in routes[0] and routes[1]["upstream"] == "http://127.0.0.1:9"
