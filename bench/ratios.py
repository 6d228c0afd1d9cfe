"""What the report and the targets share: medians by workload and system, and their ratios."""

from __future__ import annotations

from typing import Any

Medians = dict[str, dict[str, dict[str, Any]]]
"""workload → system → median of each measure (bench/run.py)."""
ADDITIVE = "mendpoint-additive"
LATENCY = ("ok-1", "error-1")
"""The one-connection rows, read by their p50 rather than their throughput."""
TIMES = "\u00d7"  # the multiplication sign, kept out of literals for the linter


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b
