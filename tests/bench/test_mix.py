"""The mix workload of the benchmark (`mix-32`, docs/performance.md#targets): 95 successes
to 5 failures of five kinds, from nginx with the benchmark's own config, each failure
answered the way the sample check expects by the bare proxy and by the gateway on the
shipped defaults (real processes on loopback; no load)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from bench import fixtures, harness, targets
from bench.run import _verify
from bench.systems import WORKLOADS, applies, systems
from bench.upstream import Nginx
from tests.support.ports import free_port

MIX = next(w for w in WORKLOADS if w.name == "mix-32")


def test_a_cycle_is_95_successes_and_one_failure_of_each_kind_spread_out() -> None:
    statuses = Counter(status for _, status in MIX.cycle)
    assert statuses == {200: 95, 404: 1, 422: 1, 429: 1, 503: 1, 444: 1}
    failures = [i for i, (_, status) in enumerate(MIX.cycle) if status != 200]
    assert [b - a for a, b in itertools.pairwise(failures)] == [20, 20, 20, 20]
    assert not applies("direct", MIX)  # nginx's 444 is no answer at all
    assert applies("mendpoint-additive[log-off+followups-off]", MIX)


def test_the_cycle_script_sends_every_path_in_turn(tmp_path: Path) -> None:
    script = harness.cycle_script(tmp_path, [p for p, _ in MIX.cycle]).read_text()
    assert script.count(fixtures.OK_PATH) == 95
    assert "BENCH_JSON" in script  # report.lua's hook is kept


@pytest.mark.parametrize("system", ["bare", "mendpoint-additive", "mendpoint-original"])
def test_every_failure_of_the_mix_is_answered_as_the_check_expects(
    tmp_path: Path, system: str
) -> None:
    with Nginx(tmp_path, free_port()) as nginx:
        for path, status in dict.fromkeys(MIX.cycle):
            direct = None if status == 444 else harness.fetch(nginx.url + path, MIX.headers)
            assert direct is None or direct.status == status
        limited = harness.fetch(nginx.url + f"{fixtures.MIX_PREFIX}/limited", MIX.headers)
        assert limited.headers["Retry-After"] == str(fixtures.MIX_RETRY_AFTER_S)
        command = systems()[system]
        assert command is not None
        port = free_port()
        proc = harness.start(command(nginx.url, port, tmp_path), tmp_path / "system.log")
        try:
            url = f"http://127.0.0.1:{port}{MIX.path}"
            harness.wait_ready(url, proc)
            _verify(system, MIX, url)  # raises on a reply the load would count wrongly
            reset = harness.fetch(f"http://127.0.0.1:{port}{fixtures.MIX_PREFIX}/reset")
            assert reset.status == 502
            # a transport fault has no body to keep: every mode answers with its own code
            assert (b"UPSTREAM_" in reset.body) == system.startswith("mendpoint-")
        finally:
            harness.stop(proc)


def test_the_mix_row_of_the_targets_reads_the_mix_workload() -> None:
    medians = {
        "mix-32": {"bare": {"rps": 1000.0}, "mendpoint-additive": {"rps": 980.0}},
    }
    rows = {name: (value, met) for name, _, _, value, met in targets.targets({"medians": medians})}
    value, met = next(v for k, v in rows.items() if k.startswith("a realistic mix"))
    assert value == pytest.approx(0.98) and met is True


def test_the_other_success_rows_are_held_against_the_baseline_twin() -> None:
    twin = "mendpoint-additive@abc1234"
    medians = {
        "ok-1": {"mendpoint-additive": {"p50_ms": 0.22}, twin: {"p50_ms": 0.20}},
        "10mb-32": {"mendpoint-additive": {"rps": 150.0}, twin: {"rps": 140.0}},
    }
    assert targets.baseline_regression(medians) == pytest.approx(0.2 / 0.22)
    assert targets.baseline_regression({"ok-1": {"mendpoint-additive": {"p50_ms": 0.2}}}) is None
    rows = {name: met for name, _, _, _, met in targets.targets({"medians": medians})}
    assert rows[next(k for k in rows if k.startswith("every row, now / --baseline"))] is True
    medians["10mb-32"][twin]["rps"] = 200.0  # 150 now against 200: slower than the noise
    rows = {name: met for name, _, _, _, met in targets.targets({"medians": medians})}
    assert rows[next(k for k in rows if k.startswith("every row, now / --baseline"))] is False


def test_the_fleet_rows_hold_the_store_against_the_same_gateway_without_it() -> None:
    medians = {
        "ok-32": {
            "mendpoint-additive": {"rps": 1000.0},
            "mendpoint-additive[fleet]": {"rps": 950.0},
        },
        "error-32": {
            "mendpoint-additive": {"rps": 500.0},
            "mendpoint-additive[fleet]": {"rps": 400.0},
        },
    }
    rows = {
        name: (value, met)
        for name, _, _, value, met in targets.earlier_targets({"medians": medians})
    }
    success = rows["success throughput, fleet store on / off"]
    error = rows["error path throughput, fleet store on / off"]
    assert success[0] == pytest.approx(0.95) and success[1] is True
    assert error[0] == pytest.approx(0.8) and error[1] is False
