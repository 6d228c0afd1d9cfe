"""`explain` says why each rule before the chosen one was passed over, in the words of each
condition that failed (docs/rules.md#debugging-a-rule-explain): every kind of HTTP condition,
one at a time and several in one rule, and the rules after the chosen one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from multidict import CIMultiDict

from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.offline.explain import Sample, explain

CHOSEN = "r-chosen"
RULES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("r-routes", {"routes": ["other"]}, ("route api is not one of other",)),
    ("r-methods", {"methods": ["PUT", "POST"]}, ("method GET is not one of POST, PUT",)),
    ("r-path", {"path": "/*/elsewhere"}, ("path /v1/items does not match its glob",)),
    ("r-idempotent", {"idempotent": False}, ("the request is safe to replay",)),
    ("r-header", {"headers": {"X-Kind": "^a$"}}, ("header x-kind is absent or does not match",)),
    (
        "r-absent-header",
        {"headers": {"X-Other": "."}},
        ("header x-other is absent or does not match",),
    ),
    (
        "r-json",
        {"json": {"path": "error.code", "equals": "E1"}},
        ("json error.code: no value there matches",),
    ),
    ("r-body", {"body": "(?i)quota"}, ("the body does not match its pattern",)),
    (
        "r-method-and-body",
        {"methods": ["DELETE"], "body": "E2"},
        ("method GET is not one of DELETE",),
    ),
    (
        "r-body-and-idempotent",
        {"idempotent": False, "body": "x{3}"},
        ("the request is safe to replay", "the body does not match its pattern"),
    ),
    (
        "r-several",
        {
            "methods": ["POST"],
            "path": "/v1/**",
            "headers": {"X-Kind": "b", "X-Other": "."},
            "json": [
                {"path": "error.code", "regex": "^E"},
                {"path": "error.items[*].id", "equals": 9},
            ],
        },
        (
            "method GET is not one of POST",
            "header x-other is absent or does not match",
            "json error.items[*].id: no value there matches",
        ),
    ),
    (CHOSEN, {"path": "/v1/**", "json": {"path": "error.code", "regex": "^E2$"}}, ()),
    ("r-after", {}, (f"not tried: {CHOSEN} matched first",)),
]


def loaded(tmp_path: Path) -> LoadedConfig:
    rules = [
        {
            "id": rule_id,
            "match": {"status": [400], **match},
            "error": {"code": rule_id.upper().replace("-", "_"), "category": "VALIDATION_ERROR"},
        }
        for rule_id, match, _ in RULES
    ]
    rules.append(
        {
            "id": "r-other-segment",
            "match": {"status": [400], "path": "/v2/**"},
            "error": {"code": "ELSEWHERE", "category": "VALIDATION_ERROR"},
        }
    )
    config = {
        "defaults": False,
        "routes": [
            {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"},
            {"name": "other", "prefix": "/other", "upstream": "http://127.0.0.1:9"},
        ],
        "rules": rules,
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return load_config(str(path))


async def test_each_rule_passed_over_says_which_conditions_failed(tmp_path: Path) -> None:
    body = {"error": {"code": "E2", "items": [{"id": 7}, {"id": 8}]}}
    sample = Sample(
        method="GET",
        path="/v1/items",
        status=400,
        headers=CIMultiDict({"Content-Type": "application/json", "X-Kind": "b"}),
        body=json.dumps(body).encode(),
    )
    result = await explain(loaded(tmp_path), sample)
    assert result.verdict is not None and result.verdict.rule.id == CHOSEN
    said = [(p.rule, p.reasons) for p in result.passed_over]
    assert said == [(rule_id, reasons) for rule_id, _, reasons in RULES if rule_id != CHOSEN]
    assert result.not_candidates == 1  # r-other-segment: written for /v2 only
