"""The first-action corpus's HTTP figures as a floor (docs/packs/corpus.md#the-floor): every
recorded HTTP answer through the embedded default, in this process, with the same
`GatewayServer` `mendpoint serve --upstream URL` runs, judged as `make corpus` judges it.

Each part is held apart (tests/first_action/floors.py): the tuned stacks and the first
held-out set to at least 95% right first action and 95% fidelity (of the failures whose
upstream body has specific words), the ranked held-out set to the figures it was recorded
with. A rule change that costs any part its figures fails here, in seconds, without the
stacks installed; every success passes byte for byte.
"""

from __future__ import annotations

import pytest

from tests.first_action.floors import counted, floor
from tests.first_action.model import HeldOut, load_http_stacks
from tests.first_action.outcome import Outcome
from tests.first_action.replay import replay_http
from tests.first_action.score import Report, tally


def misses(outcomes: list[Outcome]) -> list[str]:
    return [
        f"{o.stack}/{o.scenario}: due {o.expect}, took {o.got}"
        + (f" ({o.reading.summary()[:200]})" if o.reading else "")
        for o in outcomes
        if o.scored and not o.right
    ]


def lost(outcomes: list[Outcome]) -> list[str]:
    return [
        f"{o.stack}/{o.scenario}: wanted {o.words}, message {message_of(o)[:120]!r}"
        for o in outcomes
        if o.kept is False
    ]


def message_of(outcome: Outcome) -> str:
    return outcome.reading.message if outcome.reading else ""


@pytest.mark.timeout(120)
async def test_http_first_action_and_fidelity_hold_their_floors_per_part() -> None:
    stacks = load_http_stacks()
    outcomes, missing = await replay_http(stacks, in_process=True)
    assert not missing
    assert len(outcomes) == sum(len(s.scenarios) for s in stacks)
    report = Report(outcomes, missing, {})
    parts: dict[HeldOut | None, list[Outcome]] = {None: report.part("http", None)}
    for name, items in report.held_out_sets("http").items():
        parts[name] = items
    assert set(parts) == {None, "first", "ranked"}
    for held_out, chosen in parts.items():
        first = tally(chosen, "first_action")
        fidelity = tally(chosen, "fidelity")
        assert first.total and fidelity.total, held_out
        for test, figure, detail in (
            ("first_action", first, misses(chosen)),
            ("fidelity", fidelity, lost(chosen)),
        ):
            assert figure.rate >= floor("http", held_out, test), (held_out, figure.text(), detail)
            assert counted("http", held_out, test) in (None, figure.total), (held_out, test)
    successes = tally(report.suite("http"), "success")
    assert successes.right == successes.total, [o.problems for o in outcomes if not o.right]
