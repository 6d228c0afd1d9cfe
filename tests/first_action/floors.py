"""What `make test` holds each part of the first-action corpus to
(docs/packs/corpus.md#the-floor).

The tuned stacks and servers and the first two held-out sets are held to 95% right first
action and 95% fidelity. The ranked set (chosen by a written rule, not by hand:
tests/first_action/held_out/selection.md) is held to what the rules written for the shapes it
found reach on it, and never above 95%: 95% where they reached it, the figure itself where they
did not (its HTTP fidelity: two scenarios ask for HTML, whose answer carries no message by
contract; docs/packs/corpus.md#the-ranked-set). A rule change may raise a figure and never
lower it. Each baseline names its scenario count too: a set whose scenarios change is
measured again before its floor is believed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.first_action.model import HeldOut
from tests.first_action.outcome import Suite
from tests.first_action.score import Tally

FLOOR = 0.95


@dataclass(frozen=True)
class Baseline:
    """A set's figures on the rules it was recorded on (in-process replay of its recording)."""

    first_action: Tally
    fidelity: Tally


BASELINE: dict[tuple[Suite, HeldOut], Baseline] = {
    # Recorded at 21c6478..e028690 on main's rules of c837dd3 at 71/71, 22/37 (HTTP) and
    # 42/49, 44/47 (MCP); these are the figures after the rules written for its shapes
    # (docs/packs/corpus.md#the-ranked-set).
    ("http", "ranked"): Baseline(Tally(71, 71), Tally(35, 37)),
    ("mcp", "ranked"): Baseline(Tally(47, 49), Tally(47, 47)),
}


def floor(suite: Suite, held_out: HeldOut | None, test: str) -> float:
    """The rate `test` (first_action or fidelity) must reach on this part of the corpus:
    95%, or a baseline's lower figure."""
    baseline = BASELINE.get((suite, held_out)) if held_out is not None else None
    if baseline is None:
        return FLOOR
    tally = {"first_action": baseline.first_action, "fidelity": baseline.fidelity}[test]
    return min(FLOOR, tally.rate)


def counted(suite: Suite, held_out: HeldOut | None, test: str) -> int | None:
    """How many scenarios the baseline was measured on (None: held to the plain floor)."""
    baseline = BASELINE.get((suite, held_out)) if held_out is not None else None
    if baseline is None:
        return None
    return {"first_action": baseline.first_action, "fidelity": baseline.fidelity}[test].total
