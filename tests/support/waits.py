"""Deadlines for waiting on real servers, scaled to how busy the machine is now.

A server started by a test is waited for by polling a condition (it listens, /readyz answers
200); the deadline only says when to give up. A fixed 10-20 s passes on a quiet machine and
fails at load 13 on two cores, where `import gateway.cli` alone took 16-20 s of wall time. So
each deadline is what a quiet machine needs with a wide margin, times `slack()`: the runnable
processes per core over the last minute (at least 1, at most MAX_SLACK).
`MENDPOINT_TEST_SLACK=N` fixes the factor instead (docs/development.md#parallel-tests).
"""

from __future__ import annotations

import os

MAX_SLACK = 10.0
"""A hung server still fails, in at most ten times its quiet-machine deadline."""


def slack() -> float:
    """How many times slower than a quiet machine this one runs now (1 when quiet)."""
    fixed = os.environ.get("MENDPOINT_TEST_SLACK")
    if fixed:
        return max(1.0, float(fixed))
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(MAX_SLACK, max(1.0, per_core))


def patience(seconds: float) -> float:
    """`seconds` (enough on a quiet machine) stretched by the machine's `slack()` now."""
    return seconds * slack()
