"""The first-action corpus's own checks (docs/packs/corpus.md): its files load, its recordings
match its scenarios, the agent reads what the procedure says, and the recorded successes pass
through the gateway byte for byte. No threshold on the first-action rate: that is the report's.
"""

from __future__ import annotations

import json

import pytest

from tests.first_action.agent import read_http, read_mcp, words_kept
from tests.first_action.http_live import in_body
from tests.first_action.mcp_live import FIRST_CALL_ID
from tests.first_action.model import (
    RECORDED,
    HttpStack,
    McpServer,
    load_http_stacks,
    load_mcp_servers,
)
from tests.first_action.outcome import Answer, says_nothing
from tests.first_action.replay import replay_http, replay_mcp
from tests.support.paths import DOCS

STACKS = load_http_stacks()
SERVERS = load_mcp_servers()


def test_the_corpus_files_load_and_the_docs_list_them() -> None:
    assert STACKS and SERVERS
    page = (DOCS / "packs" / "corpus.md").read_text("utf-8")
    names = [s.name for s in STACKS] + [s.name for s in SERVERS]
    unlisted = [name for name in names if f"| {name} |" not in page]
    assert not unlisted, f"docs/packs/corpus.md does not list {unlisted}"


@pytest.mark.parametrize("stack", STACKS, ids=lambda s: s.name)
def test_an_http_recording_matches_its_scenarios(stack: HttpStack) -> None:
    path = RECORDED / "http" / f"{stack.name}.json"
    recorded = {item["id"]: item for item in json.loads(path.read_text("utf-8"))["scenarios"]}
    assert list(recorded) == [s.id for s in stack.scenarios]
    for scenario in stack.scenarios:
        answer = Answer.from_json(recorded[scenario.id]["answer"])
        assert all(in_body(word, answer.text()) for word in scenario.words), scenario.id
        assert answer.status is not None, scenario.id
        assert (answer.status < 400) == (scenario.expect == "success"), scenario.id


@pytest.mark.parametrize("server", SERVERS, ids=lambda s: s.name)
def test_an_mcp_recording_matches_its_calls(server: McpServer) -> None:
    path = RECORDED / "mcp" / f"{server.name}.json"
    responses = json.loads(path.read_text("utf-8"))["responses"]
    for index, call in enumerate(server.calls):
        text = responses[str(FIRST_CALL_ID + index)]
        assert text is not None, call.id
        assert all(in_body(word, text.encode()) for word in call.words), call.id


def test_the_agent_reads_the_error_object_then_failure_then_headers() -> None:
    fix = json.dumps({"error": {"retryable": False, "fix_required": "send qty"}}).encode()
    assert read_http({}, fix).action == "fix"
    spring = {"error": "Bad Request", "failure": {"retryable": True, "code": "X"}}
    assert read_http({}, json.dumps(spring).encode()).action == "retry"
    command = {"error": {"retryable": False, "fix_required": "f", "fix_command": "login"}}
    assert read_http({}, json.dumps(command).encode()).action == "run_fix"
    assert read_http({"x-error-retryable": "true"}, b"<html>").action == "retry"
    headers = {"x-error-retryable": "false", "x-error-recoverable": "true"}
    assert read_http(headers, b"oops").action == "fix"
    assert read_http({"x-error-retryable": "false"}, b"oops").action == "stop"
    assert read_http({}, b"<html>").source == "none"


def test_the_agent_reads_mcp_failures_where_the_gateway_puts_them() -> None:
    failure = {"error": {"retryable": True, "message": "later"}}
    item = {"type": "text", "text": json.dumps({"mendpoint_failure": failure})}
    tool_error = {"result": {"isError": True, "content": [{"type": "text", "text": "x"}, item]}}
    reading = read_mcp(tool_error)
    assert reading is not None and reading.action == "retry" and reading.source == "content"
    meta = {"result": {"isError": True, "content": [], "_meta": {"mendpoint/failure": failure}}}
    assert read_mcp(meta) is not None
    rpc = {"error": {"code": -32602, "message": "bad", "data": "x"}}
    reading = read_mcp(rpc)
    assert reading is not None and reading.action == "stop" and reading.source == "none"
    assert read_mcp({"result": {"isError": False, "content": []}}) is None
    assert words_kept(["Field  required"], "repo_path: field required")


@pytest.mark.slow  # a gateway and one `mendpoint stdio` per server: seconds each on a busy machine
@pytest.mark.timeout(300)
async def test_recorded_successes_pass_through_byte_for_byte() -> None:
    http, missing = await replay_http(STACKS)
    assert not missing
    successes = [o for o in http if not o.failure]
    assert successes and all(o.right for o in successes), [o.problems for o in successes]
    mcp, missing = await replay_mcp(SERVERS)
    assert not missing
    successes = [o for o in mcp if not o.failure]
    assert successes and all(o.right for o in successes), [o.problems for o in successes]
    assert len(http) + len(mcp) == sum(len(s.scenarios) for s in STACKS) + sum(
        len(s.calls) for s in SERVERS
    )


@pytest.mark.parametrize(
    ("text", "nothing"),
    [
        ("Error executing tool ListKnowledgeBases", True),
        ("Error executing tool read_file: ", True),
        ("Could not fetch the resource.", True),
        ("Error: undefined", True),
        ("", True),
        ("Error executing tool get: 'item-42'", False),
        ("Error: cart is empty", False),
        ("Key not found: vegetable", False),
    ],
)
def test_a_text_that_says_nothing_beyond_failing_is_told_apart(text: str, nothing: bool) -> None:
    assert says_nothing(text) is nothing
