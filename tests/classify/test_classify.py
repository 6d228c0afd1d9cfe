"""The rules engine: order, indexing, matchers, templates and the safety of what it emits."""

from __future__ import annotations

import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from gateway.classify import Classifier, Observation, ObservationKind
from gateway.classify.templates import parse_duration_ms
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.failure import TransportKind
from gateway.text.safe_text import _CONTROL, _SPACES, clean_text

TRANSPORT = ObservationKind.TRANSPORT
TOOL_ERROR = ObservationKind.TOOL_ERROR
JSONRPC = ObservationKind.JSONRPC_ERROR


def loaded_with(tmp_path: Path, rules: list[dict[str, Any]], **extra: Any) -> LoadedConfig:
    config = {
        "routes": [
            {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"},
            {
                "name": "jobs",
                "prefix": "/jobs",
                "upstream": "http://127.0.0.1:9",
                "idempotent_methods": ["GET"],
            },
        ],
        "rules": rules,
        **extra,
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return load_config(str(path))


def obs(
    status: int | None = 400,
    body: str | None = "",
    kind: ObservationKind = ObservationKind.STATUS,
    **kw: Any,
) -> Observation:
    fields: dict[str, Any] = {"route": "api", "method": "GET", "path": "/x", **kw}
    raw = None if body is None else body.encode()
    return Observation(kind=kind, status=status, body=raw, **fields)


def rule(rule_id: str, match: dict[str, Any], code: str = "CUSTOM", **error: Any) -> dict[str, Any]:
    return {
        "id": rule_id,
        "match": match,
        "error": {"code": code, "category": "VALIDATION_ERROR", **error},
    }


def test_inline_rules_win_over_packs_and_defaults(tmp_path: Path) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_text(yaml.safe_dump({"rules": [rule("pack-400", {"status": [400]}, "FROM_PACK")]}))
    loaded = loaded_with(
        tmp_path,
        [rule("inline-400", {"status": [400], "body": "inline"}, "FROM_INLINE")],
        include=["builtin:http-defaults", "pack.yaml"],
    )
    classifier = Classifier(loaded)
    first = classifier.classify(obs(body="inline please"))
    second = classifier.classify(obs(body="other"))
    third = classifier.classify(obs(status=404))
    assert first is not None and first.failure.code == "FROM_INLINE"
    assert second is not None and second.failure.code == "FROM_PACK"
    assert third is not None and third.failure.code == "NOT_FOUND" and third.rule.is_default


def test_candidates_are_indexed_by_status(tmp_path: Path) -> None:
    shipped = Classifier(loaded_with(tmp_path, []))  # the stack packs and the fallbacks
    many = [rule(f"r{i}", {"status": [418], "body": f"needle{i}"}) for i in range(300)]
    classifier = Classifier(loaded_with(tmp_path, many))
    assert len(shipped.candidates(obs(status=418))) == 1  # the 4xx default
    assert len(classifier.candidates(obs(status=418))) == 300 + 1
    ids = [r.id for r in classifier.candidates(obs(status=404))]
    assert ids == [r.id for r in shipped.candidates(obs(status=404))]
    reset = obs(None, kind=TRANSPORT, transport=TransportKind.RESET)
    assert [r.id for r in classifier.candidates(reset)] == [
        "transport-reset-idempotent",
        "transport-reset",
    ]


def test_a_tool_error_is_not_tried_against_rules_that_need_a_jsonrpc_code(tmp_path: Path) -> None:
    """The MCP index: a tool error (no JSON-RPC code) gets the MCP rules without a
    `jsonrpc_code`, in order; a JSON-RPC error gets them all."""
    loaded = loaded_with(tmp_path, [])  # builtin:mcp-defaults included
    classifier = Classifier(loaded)
    tool = [r.id for r in classifier.candidates(obs(None, kind=TOOL_ERROR, tool="read_file"))]
    coded_error = obs(None, kind=JSONRPC, tool="read_file", jsonrpc_code=-32601)
    every = [r.id for r in classifier.candidates(coded_error)]
    mcp = {r.spec.id: r.spec.match.mcp for r in loaded.rules if r.spec.match.mcp}
    coded = {rule_id for rule_id, spec in mcp.items() if spec.jsonrpc_code is not None}
    assert coded and "mcp-method-not-found" in coded and "mcp-enoent" in tool
    assert tool == [rule_id for rule_id in every if rule_id not in coded]
    verdict = classifier.classify(obs(None, "ENOENT: x", TOOL_ERROR, tool="read_file"))
    assert verdict is not None and verdict.rule.id == "mcp-enoent"
    coded_verdict = classifier.classify(obs(None, "{}", JSONRPC, tool="x", jsonrpc_code=-32601))
    assert coded_verdict is not None and coded_verdict.rule.id == "mcp-method-not-found"


def test_success_status_is_inspected_only_when_a_rule_names_it(tmp_path: Path) -> None:
    classifier = Classifier(
        loaded_with(
            tmp_path,
            [rule("soft-error", {"status": [200], "json": {"path": "ok", "equals": False}})],
        )
    )
    assert classifier.has_rules_for(200)
    assert not classifier.has_rules_for(201)
    assert not classifier.has_rules_for(302)
    hit = classifier.classify(obs(status=200, body='{"ok": false}'))
    assert hit is not None and hit.rule.id == "soft-error"
    assert classifier.classify(obs(status=200, body='{"ok": true}')) is None


@pytest.mark.parametrize(
    ("match", "observation", "hits"),
    [
        ({"methods": ["POST"]}, {"method": "POST"}, True),
        ({"methods": ["POST"]}, {"method": "GET"}, False),
        ({"routes": ["jobs"]}, {"route": "jobs"}, True),
        ({"routes": ["jobs"]}, {"route": "api"}, False),
        ({"path": "/v1/csv/**"}, {"path": "/v1/csv/a/b"}, True),
        ({"path": "/v1/*/x"}, {"path": "/v1/a/b/x"}, False),
        (
            {"headers": {"Content-Type": "json"}},
            {"headers": CIMultiDict({"content-type": "application/json"})},
            True,
        ),
        ({"headers": {"Content-Type": "json"}}, {"headers": CIMultiDict()}, False),
        (
            {"json": {"path": "detail.0.msg", "regex": "email"}},
            {"body": '{"detail":[{"msg":"bad email"}]}'},
            True,
        ),
        (
            {"json": {"path": "detail.1.msg", "regex": "email"}},
            {"body": '{"detail":[{"msg":"bad email"}]}'},
            False,
        ),
        ({"json": {"path": "code", "equals": 7}}, {"body": '{"code": 7}'}, True),
        ({"body": "(?i)quota"}, {"body": "QUOTA exceeded"}, True),
        ({"body": "quota"}, {"body": None}, False),
    ],
    ids=[
        "method",
        "method-miss",
        "route",
        "route-miss",
        "glob-deep",
        "glob-star-one-segment",
        "header",
        "header-absent",
        "json-list-index",
        "json-missing-index",
        "json-equals",
        "body",
        "body-unavailable",
    ],
)
def test_matchers(
    tmp_path: Path, match: dict[str, Any], observation: dict[str, Any], hits: bool
) -> None:
    classifier = Classifier(
        loaded_with(tmp_path, [rule("r", {"status": [400], **match})], defaults=False)
    )
    fields: dict[str, Any] = {"body": "", **observation}
    body = fields.pop("body")
    verdict = classifier.classify(obs(body=body, **fields))
    assert (verdict is not None) == hits


def test_catastrophic_regex_times_out_as_no_match(tmp_path: Path) -> None:
    loaded = loaded_with(
        tmp_path,
        [rule("evil", {"status": [400], "body": "^(a+)+$"})],
        limits={"regex_timeout_ms": 20},
    )
    classifier = Classifier(loaded)
    started = time.monotonic()
    verdict = classifier.classify(obs(body="a" * 40 + "!"))
    assert time.monotonic() - started < 2
    assert verdict is not None and verdict.rule.id == "http-400"


def test_a_regex_that_times_out_marks_the_observation(tmp_path: Path) -> None:
    """The verdict made past a timed-out regex is not what an unhurried search gives: the
    observation says so, and the answer cache keeps no such verdict (docs/performance.md)."""
    loaded = loaded_with(
        tmp_path,
        [rule("slow", {"status": [400], "body": "^(\\w+\\s?)*$"})],
        limits={"regex_timeout_ms": 5},
    )
    classifier = Classifier(loaded)
    slow = obs(body="a" * 5000 + "!")
    verdict = classifier.classify(slow)
    assert verdict is not None and verdict.rule.id == "http-400" and slow.regex_gave_up
    calm = obs(body="a b")
    verdict = classifier.classify(calm)
    assert verdict is not None and verdict.rule.id == "slow" and not calm.regex_gave_up


def test_captures_fill_templates_cleaned_and_cut(tmp_path: Path) -> None:
    loaded = loaded_with(
        tmp_path,
        [
            rule(
                "csv",
                {"status": [400], "body": "row (?P<line>\\S+) bad: (?P<why>.*)"},
                message="Row {line} on {method} {path}: {why}",
                fix_required="Fix row {line}",
            )
        ],
    )
    verdict = Classifier(loaded).classify(
        obs(body="row 7\x1b[31m bad: " + "x" * 500, method="POST", path="/up")
    )
    assert verdict is not None
    failure = verdict.failure
    assert failure.message.startswith("Row 7 [31m on POST /up: ")
    assert "\x1b" not in failure.message
    assert len(failure.message) < 300
    assert failure.fix_required == "Fix row 7 [31m"


def test_fix_command_comes_only_from_the_registry(tmp_path: Path) -> None:
    loaded = loaded_with(
        tmp_path,
        [
            rule(
                "auth",
                {"status": [401]},
                "TOKEN_EXPIRED",
                fix_required="Refresh, then reissue",
                fix_command="refresh",
            )
        ],
        commands={"refresh": {"run": "tool auth refresh", "idempotent": True}},
    )
    verdict = Classifier(loaded).classify(obs(status=401, body="$(rm -rf /); `id` | sh"))
    assert verdict is not None
    assert verdict.failure.fix_command == "tool auth refresh"


def test_non_idempotent_method_on_route_downgrades_retryable(tmp_path: Path) -> None:
    """The rule allows DELETE retries, but route `jobs` does not count DELETE as idempotent."""
    loaded = loaded_with(
        tmp_path,
        [
            rule(
                "busy",
                {"status": [502], "methods": ["GET", "DELETE"]},
                "BUSY",
                retryable=True,
                retry_after_ms=100,
            )
        ],
    )
    classifier = Classifier(loaded)
    on_api = classifier.classify(obs(status=502, method="DELETE", idempotent=True))
    on_jobs = classifier.classify(obs(status=502, method="DELETE", route="jobs", idempotent=False))
    assert on_api is not None and on_api.failure.retryable and on_api.failure.retry_after_ms == 100
    assert on_jobs is not None and not on_jobs.failure.retryable
    assert on_jobs.failure.retry_after_ms is None


def test_no_rule_matches_without_defaults(tmp_path: Path) -> None:
    classifier = Classifier(loaded_with(tmp_path, [], defaults=False))
    assert classifier.classify(obs(status=500)) is None
    assert not classifier.has_rules_for(500)


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.characters(), max_size=80))
def test_clean_text_fast_path_matches_the_full_cleaning(value: str) -> None:
    """The printable shortcut must give exactly what the two substitutions give."""
    full = _SPACES.sub(" ", _CONTROL.sub(" ", value)).strip()
    assert clean_text(value, 1000) == full
    unsafe = {"Cc", "Cf", "Zl", "Zp"}
    assert not any(unicodedata.category(c) in unsafe for c in clean_text(value, 1000))
    assert "  " not in clean_text(value, 1000)


@pytest.mark.parametrize(
    ("text", "unit", "ms"),
    [
        ("30 seconds", "s", 30_000),
        ("12s", "s", 12_000),
        ("7", "s", 7_000),
        ("7 ", "ms", 7),
        ("500ms", "s", 500),
        ("250 milliseconds", "s", 250),
        ("2 minutes", "s", 120_000),
        ("1 min", "s", 60_000),
        ("1.5h", "s", 5_400_000),
        ("3 secs.", "s", 3_000),
        ("soon", "s", None),
        ("30 parsecs", "s", None),
        ("", "s", None),
        (None, "s", None),
    ],
)
def test_durations_as_servers_write_them(text: str | None, unit: str, ms: float | None) -> None:
    assert parse_duration_ms(text, unit) == ms
