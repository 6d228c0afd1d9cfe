"""Rule conditions as data (gateway/classify/conditions.py): the table of condition kinds and
the `match:` model users write (and whose JSON Schema their editors read) name the same keys,
so a key cannot be accepted by the model and ignored by the matcher, nor the reverse
(CONTRIBUTING.md#adding-a-rule-condition)."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gateway.classify import Classifier, Observation, ObservationKind
from gateway.classify.conditions import CONDITIONS, build_conditions
from gateway.classify.rules import INDEX_KEYS
from gateway.classify.why_not import passed_over
from gateway.config.loader import load_config
from gateway.config.rule_model import MatchSpec


def match_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key of the model as users write it (aliases), a nested block's as `block.key`."""
    keys = set()
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        keys.add(key)
        block = _block(info.annotation)
        if block is not None:
            keys |= match_keys(block, f"{key}.")
    return keys


def _block(annotation: Any) -> type[BaseModel] | None:
    """The model of a nested block (`mcp: {...}`); None for a value, a list or a choice of
    shapes (`json:`, one condition or a list of them, is one condition)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        shapes = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = shapes[0] if len(shapes) == 1 else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def test_every_match_key_is_an_index_fact_or_a_condition() -> None:
    written = match_keys(MatchSpec)
    conditions = {kind.key for kind in CONDITIONS}
    assert "mcp.tool" in written and "json" in written  # nested blocks and aliases are read
    assert written - INDEX_KEYS - conditions == set(), "a match: key no condition tests"
    assert conditions - written == set(), "a condition no match: key writes"
    assert INDEX_KEYS - written == set(), "an index fact no match: key writes"


def test_each_kind_of_condition_has_its_own_key() -> None:
    keys = [kind.key for kind in CONDITIONS]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("kind", CONDITIONS, ids=[kind.key for kind in CONDITIONS])
def test_a_key_not_written_builds_no_condition(kind: type[Any]) -> None:
    assert kind.build(MatchSpec(), "r") == ()


def test_conditions_are_built_in_the_tables_order() -> None:
    match = MatchSpec.model_validate(
        {
            "body": "x",
            "headers": {"X-B": "b", "X-A": "a"},
            "methods": ["post"],
            "mcp": {"missing_required": True, "tool": "t*"},
            "routes": ["api"],
        }
    )
    built = [(type(c).__name__, c.headers_read) for c in build_conditions(match, "r")]
    assert built == [
        ("Routes", ()),
        ("Methods", ()),
        ("Tool", ()),
        ("MissingRequired", ()),
        ("HeaderValue", ("x-b",)),
        ("HeaderValue", ("x-a",)),
        ("BodyText", ()),
    ]


MCP_RULES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("m-tool", {"mcp": {"tool": "write_*"}}, ("tool does not match",)),
    ("m-code", {"mcp": {"jsonrpc_code": -32601}}, ("jsonrpc_code does not match",)),
    (
        "m-missing",
        {"mcp": {"missing_required": True}},
        ("the call did not leave out a required argument",),
    ),
    ("m-idempotent", {"mcp": {}, "idempotent": True}, ("the request is not safe to replay",)),
    (
        "m-argument",
        {"mcp": {"argument": "only"}},
        ("the message is not only a value the call sent",),
    ),
    (
        "m-credential",
        {"mcp": {"credential_argument": True}},
        ("the tool takes no credential as an argument",),
    ),
    (
        "m-several",
        {"mcp": {"tool": "write_*", "missing_required": True}, "body": "nowhere"},
        (
            "tool does not match",
            "the call did not leave out a required argument",
            "the body does not match its pattern",
        ),
    ),
    ("m-chosen", {"mcp": {"tool": "read_*"}}, ()),
]


def test_each_mcp_condition_says_why_it_failed(tmp_path: Path) -> None:
    rules = [
        {"id": rule_id, "match": match, "error": {"code": "X", "category": "VALIDATION_ERROR"}}
        for rule_id, match, _ in MCP_RULES
    ]
    config = {
        "defaults": False,
        "routes": [{"name": "tools", "type": "mcp", "upstream": "http://127.0.0.1:9/mcp"}],
        "rules": rules,
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    classifier = Classifier(load_config(str(path)))
    obs = Observation(
        route="tools",
        method="POST",
        path="/mcp",
        kind=ObservationKind.JSONRPC_ERROR,
        body=b'{"code": -32602, "message": "bad"}',
        content_type="application/json",
        idempotent=False,
        tool="read_file",
        jsonrpc_code=-32602,
    )
    verdict = classifier.classify(obs)
    assert verdict is not None and verdict.rule.id == "m-chosen"
    said, untried = passed_over(classifier, obs, verdict.rule)
    assert [(p.rule, p.reasons) for p in said] == [(r, why) for r, _, why in MCP_RULES[:-1]]
    assert untried == 0
    tool_error = Observation(
        route="tools", method="POST", path="/mcp", kind=ObservationKind.TOOL_ERROR, tool="x"
    )
    assert "m-code" not in {r.id for r in classifier.candidates(tool_error)}
