"""The MCP half of the first-action corpus as a threshold (docs/packs/corpus.md#the-threshold):
every recorded failing call of every corpus server, through the embedded default's upgrade
step in process (tests/first_action/replay_inprocess.py), must give the weakest agent the right
first action at least 95% of the time, and keep the server's words in `error.message` as
often. Each held-out set (docs/packs/corpus.md#the-held-out-sets) is scored apart: the first
two to the same floor, the ranked one to the figures it was recorded with
(tests/first_action/floors.py); recorded before the rules that serve them were written and
never tuned for, they are the check that the rules generalise.
"""

from __future__ import annotations

import pytest

from tests.first_action.floors import counted, floor
from tests.first_action.model import HeldOut, McpServer, load_mcp_servers
from tests.first_action.outcome import Outcome
from tests.first_action.replay_inprocess import recording, replay_server
from tests.first_action.score import tally

THRESHOLD = 0.95
SERVERS = load_mcp_servers()


async def _outcomes(servers: list[McpServer]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for server in servers:
        recorded = recording(server)
        assert recorded is not None, f"{server.name}: no recording (run make corpus)"
        outcomes.extend(await replay_server(server, recorded))
    return outcomes


def _misses(outcomes: list[Outcome]) -> list[str]:
    return [
        f"{o.stack}/{o.scenario}: due {o.expect}, took {o.got} "
        f"({o.reading.summary()[:160] if o.reading else 'nothing'})"
        for o in outcomes
        if o.scored and not o.right
    ]


@pytest.mark.timeout(60)
async def test_the_mcp_corpus_gets_the_right_first_action_95_percent_of_the_time() -> None:
    corpus = [s for s in SERVERS if s.held_out is None]
    outcomes = await _outcomes(corpus)
    assert len(outcomes) == sum(len(s.calls) for s in corpus)
    first = tally(outcomes, "first_action")
    fidelity = tally(outcomes, "fidelity")
    successes = tally(outcomes, "success")
    print(f"MCP corpus: first action {first.text()}, fidelity {fidelity.text()}")
    assert first.total >= 50
    assert first.rate >= THRESHOLD, _misses(outcomes)
    assert fidelity.rate >= THRESHOLD
    assert successes.right == successes.total, "a recorded success did not pass through"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("held_out", ["first", "second", "ranked"])
async def test_each_held_out_set_holds_its_floor(held_out: HeldOut) -> None:
    servers = [s for s in SERVERS if s.held_out == held_out]
    assert len(servers) >= 3
    outcomes = await _outcomes(servers)
    assert len(outcomes) == sum(len(s.calls) for s in servers)
    first = tally(outcomes, "first_action")
    fidelity = tally(outcomes, "fidelity")
    print(f"MCP held-out {held_out}: first action {first.text()}, fidelity {fidelity.text()}")
    assert first.total >= 18
    assert first.rate >= floor("mcp", held_out, "first_action"), _misses(outcomes)
    assert fidelity.rate >= floor("mcp", held_out, "fidelity")
    assert counted("mcp", held_out, "first_action") in (None, first.total)
    assert counted("mcp", held_out, "fidelity") in (None, fidelity.total)
    assert tally(outcomes, "success").rate == 1.0
