"""An edited draft tried and saved (gateway/offline/draft_try.py, draft_save.py): `explain`
with the running config plus the draft on each sample, and the drafts file appended only
after it loads as `mendpoint check` loads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from multidict import CIMultiDict

from gateway.config.errors import ConfigError
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.offline.draft_save import save_draft
from gateway.offline.draft_try import DraftRefused, try_draft
from gateway.offline.explain import Sample

DRAFT = """\
rules:
- id: account-missing
  match:
    routes: [api]
    status: [404]
    path: /accounts/*
  error:
    code: ACCOUNT_MISSING
    category: NOT_FOUND
    fix_required: give the id of an account that exists
"""


def running(tmp_path: Path, opted_in: bool = True) -> LoadedConfig:
    drafts = tmp_path / "drafts.yaml"
    drafts.write_text("rules: []\n")
    config: dict[str, object] = {
        "routes": [
            {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9", "mode": "headers"}
        ],
        "include": ["drafts.yaml"],
    }
    if opted_in:
        config["console"] = {"drafts_file": "drafts.yaml"}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_config(str(path))


def sample(path: str, status: int, body: object, content_type: str) -> Sample:
    return Sample(
        method="GET",
        path=path,
        status=status,
        headers=CIMultiDict({"Content-Type": content_type}),
        body=json.dumps(body).encode() if not isinstance(body, str) else body.encode(),
    )


LEGACY = sample(
    "/accounts/7",
    404,
    {"errorCode": "E1004", "errorMessage": "Account 7 does not exist"},
    "application/json",
)
PROBLEM = sample(
    "/accounts/8",
    422,
    {"title": "Invalid", "status": 422, "invalid-params": [{"name": "age", "reason": "< 0"}]},
    "application/problem+json",
)
INVALID = """\
- id: account-invalid
  match:
    routes: [api]
    status: [422]
    path: /accounts/*
  error:
    code: ACCOUNT_INVALID
    category: VALIDATION_ERROR
    fix_required: correct the account's fields
"""
OTHER = sample("/reports/1", 500, "<html><h1>Internal Server Error</h1></html>", "text/html")


async def test_a_draft_tried_says_what_it_matches_takes_and_answers(tmp_path: Path) -> None:
    loaded = running(tmp_path)
    result = await try_draft(
        loaded, DRAFT + INVALID, [("legacy", LEGACY), ("problem", PROBLEM), ("other", OTHER)]
    )
    assert result.ids == ("account-missing", "account-invalid")
    legacy, problem, other = result.samples
    # A fallback named it before: matched, not taken.
    assert legacy.before == "http-404" and legacy.after == "account-missing"
    assert legacy.state(result.ids) == "matched"
    # The problem-details pack named it: the draft, included before the shape packs, takes it.
    assert problem.before == "problem-details-invalid-params"
    assert problem.after == "account-invalid"
    assert problem.state(result.ids) == "taken"
    assert other.state(result.ids) == "other" and other.after == other.before
    assert [s.label for s in result.taken] == ["problem"]
    assert len(result.matched) == 2
    # In the route's mode (headers): the upstream's bytes, the draft's code in the headers.
    assert legacy.answer is not None
    assert legacy.answer.body == LEGACY.body
    assert legacy.answer.headers["X-Error-Code"] == "ACCOUNT_MISSING"
    assert legacy.answer.status == 404


async def test_a_draft_that_does_not_load_is_refused_with_the_reason(tmp_path: Path) -> None:
    loaded = running(tmp_path)
    with pytest.raises(DraftRefused, match="rules"):
        await try_draft(loaded, "match: {}\n", [("legacy", LEGACY)])
    with pytest.raises(DraftRefused, match="not_a_key"):
        await try_draft(loaded, DRAFT + "  not_a_key: 1\n", [("legacy", LEGACY)])
    with pytest.raises(DraftRefused, match="commands"):
        await try_draft(loaded, DRAFT + "commands: {}\n", [("legacy", LEGACY)])


async def test_save_appends_to_the_drafts_file_and_the_config_loads_it(tmp_path: Path) -> None:
    loaded = running(tmp_path)
    saved = save_draft(loaded, DRAFT)
    assert saved.ids == ("account-missing",) and saved.path == str(tmp_path / "drafts.yaml")
    second = DRAFT.replace("account-missing", "report-broken").replace("404", "500")
    second = second.replace("/accounts/*", "/reports/*").replace("ACCOUNT_MISSING", "REPORT")
    save_draft(load_config(loaded.source), second.replace("NOT_FOUND", "UPSTREAM_ERROR"))
    rules = yaml.safe_load((tmp_path / "drafts.yaml").read_text())["rules"]
    assert [r["id"] for r in rules] == ["account-missing", "report-broken"]
    reloaded = load_config(loaded.source)
    assert [r.spec.id for r in reloaded.rules if r.source.file == saved.path] == [
        "account-missing",
        "report-broken",
    ]
    result = await try_draft(reloaded, second.replace("report-broken", "x"), [("l", LEGACY)])
    assert result.samples[0].before == "account-missing"


def test_save_refuses_what_check_refuses_and_leaves_the_file(tmp_path: Path) -> None:
    loaded = running(tmp_path)
    save_draft(loaded, DRAFT)
    before = (tmp_path / "drafts.yaml").read_bytes()
    with pytest.raises(DraftRefused, match="duplicate rule id 'account-missing'") as caught:
        save_draft(load_config(loaded.source), DRAFT)
    assert str(tmp_path / "drafts.yaml") in str(caught.value)  # never the staged file's name
    with pytest.raises(DraftRefused, match="invalid regex"):
        save_draft(
            loaded, DRAFT.replace("path: /accounts/*", "body: '('").replace("-missing", "-x")
        )
    assert (tmp_path / "drafts.yaml").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_save_needs_the_opt_in(tmp_path: Path) -> None:
    with pytest.raises(DraftRefused, match=r"console\.drafts_file"):
        save_draft(running(tmp_path, opted_in=False), DRAFT)


def test_a_value_from_traffic_stays_one_value_in_the_saved_file(tmp_path: Path) -> None:
    """A line separator in a message cannot end a comment or a value and add a rule
    (docs/security.md#drafted-yaml): the text is written again, as data, by yaml_writer."""
    loaded = running(tmp_path)
    hostile = "Account gone\u2028- id: planted\u2029  error: NOT_FOUND #"
    text = DRAFT.replace("give the id of an account that exists", json.dumps(hostile))
    save_draft(loaded, text)
    rules = yaml.safe_load((tmp_path / "drafts.yaml").read_text())["rules"]
    assert [r["id"] for r in rules] == ["account-missing"]
    assert rules[0]["error"]["fix_required"] == hostile


def test_a_drafts_file_the_config_does_not_include_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "drafts.yaml").write_text("rules: []\n")
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "routes:\n  - {name: api, prefix: /, upstream: 'http://127.0.0.1:9'}\n"
        "console:\n  drafts_file: drafts.yaml\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    (problem,) = caught.value.problems
    assert (problem.file, problem.line, problem.field) == (str(path), 4, "console.drafts_file")
    assert "is not a file of `include:`" in problem.message
