"""The wasted-work table (bench/agents.py): medians per class, the cells, the targets."""

from __future__ import annotations

from bench.agents import markdown, plan, summary, target_misses
from tasks import FailureClass, Run


def run(
    failure: FailureClass, adapter: bool, calls: int, turns: int, ok: bool, read: str = ""
) -> Run:
    return Run("langchain", adapter, failure, "mcp", failure, turns, calls, ok, 1.0, [read])


def test_the_targets_are_read_on_the_adapters_medians() -> None:
    runs = [
        run("transient", False, 2, 3, True),
        run("transient", True, 2, 2, True),
        run("correctable", True, 2, 3, True, "Fix required: Use a path"),
        run("terminal", False, 4, 5, False),
        run("terminal", True, 1, 2, False),
    ]
    rows = summary(runs)
    assert [row["failure"] for row in rows] == ["transient", "correctable", "terminal"]
    assert target_misses(rows) == []
    table = markdown({"rows": rows, "settings": {"reps": 1, "think_s": 0.5}, "misses": []})
    assert "| langchain | mcp | terminal | 4 → 1 | 5 → 2 | 1.00 | failure |" in table
    assert "| langchain | mcp | correctable | — → 2 | — → 3 |" in table
    # A terminal failure retried, a transient one that cost a turn, a fix the model never read.
    worse = [
        run("transient", True, 2, 3, True),
        run("correctable", True, 2, 3, True, "FILE_NOT_FOUND"),
        run("terminal", True, 2, 2, False),
    ]
    misses = target_misses(summary(worse))
    assert len(misses) == 3 and misses[2] == "langchain mcp terminal: 2 calls, 2 turns"


def test_the_plan_interleaves_with_and_without_the_adapter() -> None:
    steps = list(plan(["pydantic-ai"], 2))
    assert [adapter for _, _, transport, adapter in steps if transport == "mcp"] == [
        False,
        True,
        True,
        False,
    ]
