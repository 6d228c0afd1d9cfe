"""The first-action corpus's HTTP figures as a floor (docs/packs/corpus.md#the-floor): every
recorded HTTP answer through the embedded default, in this process, with the same
`GatewayServer` `mendpoint serve --upstream URL` runs, judged as `make corpus` judges it.

At least 95% of the failure scenarios get the right first action and at least 95% of those
whose upstream body has specific words keep them in `error.message`, over the whole corpus
and over the held-out stacks alone (docs/packs/corpus.md#held-out-stacks). A rule change that
costs the corpus its figures fails here, in seconds, without the stacks installed.
"""

from __future__ import annotations

import pytest

from tests.first_action.model import load_http_stacks
from tests.first_action.outcome import Outcome
from tests.first_action.replay import replay_http
from tests.first_action.score import Report, tally

FLOOR = 0.95


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
async def test_http_first_action_and_fidelity_are_at_least_95_percent() -> None:
    stacks = load_http_stacks()
    outcomes, missing = await replay_http(stacks, in_process=True)
    assert not missing
    assert len(outcomes) == sum(len(s.scenarios) for s in stacks)
    report = Report(outcomes, missing, {})
    for part, chosen in (("all", report.suite("http")), ("held-out", report.part("http", "first"))):
        first = tally(chosen, "first_action")
        fidelity = tally(chosen, "fidelity")
        assert first.total and fidelity.total, part
        assert first.rate >= FLOOR, (part, first.text(), misses(chosen))
        assert fidelity.rate >= FLOOR, (part, fidelity.text(), lost(chosen))
    successes = tally(report.suite("http"), "success")
    assert successes.right == successes.total, [o.problems for o in outcomes if not o.right]
