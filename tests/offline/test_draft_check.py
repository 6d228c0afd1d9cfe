"""Drafts tried before they are offered (gateway/offline/draft_check.py): each wins its own
samples under the running config plus the drafts file, or is left out with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.offline.draft_check import draft_rules
from gateway.offline.draft_file import fixture_cases
from gateway.offline.suggest import Sample

ROUTE = {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}


def running(tmp_path: Path, **more: Any) -> LoadedConfig:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"routes": [ROUTE], **more}))
    return load_config(str(path))


def legacy(n: int, count: int = 1, route: str = "api") -> Sample:
    body = json.dumps({"errorCode": "E1004", "errorMessage": f"Account {n} does not exist"})
    sample = Sample(route, "GET", f"/accounts/{n}", 404, "application/json", body, "Not Found")
    sample.count = count
    return sample


def empty(n: int) -> Sample:
    return Sample("api", "GET", f"/accounts/{n}/card", 404, "", "", "Not Found")


def unread(n: int) -> Sample:
    body = json.dumps({"errMsg": f"Card {n} has expired"})
    return Sample("api", "POST", "/cards", 402, "application/json", body, "Payment Required")


async def test_a_draft_names_its_samples_counts_and_real_bodies(tmp_path: Path) -> None:
    samples = [legacy(11, count=34), legacy(12, count=98)]
    drafted = await draft_rules(samples, running(tmp_path))
    (draft,) = drafted.drafts
    assert (draft.code, draft.path, draft.count) == ("E1004", "/accounts/*", 132)
    assert [case["response"]["body"] for case in fixture_cases([draft])] == [
        s.body for s in samples
    ]
    assert drafted.by_sample[id(samples[1])] is draft
    assert drafted.proposals == []  # errorMessage is read by default


async def test_words_under_a_key_no_path_reads_are_matched_and_the_key_proposed(
    tmp_path: Path,
) -> None:
    drafted = await draft_rules([unread(1), unread(2)], running(tmp_path))
    (draft,) = drafted.drafts
    assert (draft.json_path, draft.pattern) == ("errMsg", "^Card (?P<v1>.+?) has expired$")
    (proposal,) = drafted.proposals
    assert proposal.startswith("extra_message_paths: ['errMsg'] in your config")
    loaded = running(tmp_path, extra_message_paths=["errMsg"])
    assert (await draft_rules([unread(1)], loaded)).proposals == []


async def test_a_draft_that_cannot_win_its_samples_is_not_offered(tmp_path: Path) -> None:
    """Captured on `api` before the config gave /accounts a route of its own: a draft for
    `api` never sees these requests, every candidate loses to the fallback, and the note
    says which rule `explain` picked instead."""
    billing = {"name": "billing", "prefix": "/accounts", "upstream": "http://127.0.0.1:9"}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"routes": [ROUTE, billing]}))
    drafted = await draft_rules([legacy(1), legacy(2)], load_config(str(path)))
    assert drafted.drafts == []
    (note,) = drafted.notes
    assert note.startswith("api 404 'code errorCode E1004' (2 failures): no draft wins")
    assert "for GET /accounts/1 → 404 explain picks http-404" in note


async def test_a_route_the_config_no_longer_has_is_said_so(tmp_path: Path) -> None:
    drafted = await draft_rules([legacy(1, route="old-name")], running(tmp_path))
    assert drafted.drafts == []
    assert drafted.notes == [
        "old-name 404 'code errorCode E1004' (1 failures): no route of the running config is "
        "named 'old-name'"
    ]


async def test_a_failure_a_rule_now_answers_is_not_drafted(tmp_path: Path) -> None:
    rule = {
        "id": "accounts-missing",
        "match": {"status": [404], "json": {"path": "errorCode", "regex": "E1004"}},
        "error": {"code": "ACCOUNT_MISSING", "category": "NOT_FOUND"},
    }
    drafted = await draft_rules([legacy(1)], running(tmp_path, rules=[rule]))
    assert drafted.drafts == []
    assert drafted.notes == [
        "api 404 'code errorCode E1004' (1 failures): covered by rule accounts-missing"
    ]


async def test_a_broad_draft_goes_after_the_narrow_ones(tmp_path: Path) -> None:
    """A body with no words is matched on status and path alone, after every draft that
    matches on words or codes, so it takes nothing of theirs."""
    samples = [empty(3), legacy(11), empty(4), legacy(12)]
    drafted = await draft_rules(samples, running(tmp_path))
    assert [(d.how, d.path) for d in drafted.drafts] == [
        ("the body's errorCode", "/accounts/*"),
        ("status and path", "/accounts/*/card"),
    ]


async def test_a_draft_id_taken_by_an_included_file_gets_another(tmp_path: Path) -> None:
    first = await draft_rules([legacy(1)], running(tmp_path))
    (draft,) = first.drafts
    taken = {
        "id": draft.id,
        "match": {"status": [404], "methods": ["DELETE"]},
        "error": {"code": "OTHER", "category": "NOT_FOUND"},
    }
    (again,) = (await draft_rules([legacy(1)], running(tmp_path, rules=[taken]))).drafts
    assert again.id == f"{draft.id}-2"
