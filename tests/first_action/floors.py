"""What `make test` holds each part of the first-action corpus to
(docs/packs/corpus.md#the-floor).

The tuned stacks and servers and the first two held-out sets are held to 95% right first
action and 95% fidelity. The ranked set (chosen by a written rule, not by hand:
tests/first_action/held_out/selection.md) was recorded on the rules of its day and is held at
the figures it had then, so a rule change may raise them and never lower them; its floor
becomes 95% once rules are written for what it found (docs/packs/corpus.md#the-ranked-set),
and its entry in BASELINE then goes.
Each baseline names its scenario count too: a set whose scenarios change is measured again
before its floor is believed.
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
    # Recorded at 21c6478..e028690 on main's rules of c837dd3 (docs/packs/corpus.md#the-ranked-set).
    ("http", "ranked"): Baseline(Tally(71, 71), Tally(22, 37)),
    ("mcp", "ranked"): Baseline(Tally(42, 49), Tally(44, 47)),
}


def floor(suite: Suite, held_out: HeldOut | None, test: str) -> float:
    """The rate `test` (first_action or fidelity) must reach on this part of the corpus."""
    baseline = BASELINE.get((suite, held_out)) if held_out is not None else None
    if baseline is None:
        return FLOOR
    return {"first_action": baseline.first_action, "fidelity": baseline.fidelity}[test].rate


def counted(suite: Suite, held_out: HeldOut | None, test: str) -> int | None:
    """How many scenarios the baseline was measured on (None: held to the plain floor)."""
    baseline = BASELINE.get((suite, held_out)) if held_out is not None else None
    if baseline is None:
        return None
    return {"first_action": baseline.first_action, "fidelity": baseline.fidelity}[test].total
