"""The in-process MCP failure microbenchmark (bench/mcp_error_path.py) measures what it says:
its replies go through the route's real rewrite, a failure upgraded, a success untouched."""

from __future__ import annotations

import asyncio

from bench import mcp_error_path


def test_the_failure_is_upgraded_and_costs_more_than_a_success() -> None:
    steps = mcp_error_path.build()
    mcp_error_path.check(steps)  # raises when the failure is not upgraded or a success is
    rows = asyncio.run(mcp_error_path.measure(steps, loops=50, rounds=1))
    assert set(rows) == {
        "failure additive",
        "success additive",
        "failure original",
        "success original",
    }
    assert rows["failure additive"] > rows["success additive"] > 0
