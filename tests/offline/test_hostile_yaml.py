"""No value from traffic, a fleet store or an upstream adds to the YAML the retrofit tools
write (docs/security.md#drafted-yaml).

Every writer (`suggest`'s rules and fixtures, from captures and from `/gaps`; `init`'s config
and fixtures; the console's drafts, which are `suggest`'s) is fed values holding each character
class YAML treats specially, and the file it writes must load, with the config loader, as
exactly the rules, routes and fixtures intended. The first test goes through a real gateway
process: a client's percent-encoded path reaches the capture decoded, as it did when a path
holding U+2028 added a rule to the drafts.
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
import urllib.parse
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from yarl import URL

from gateway.cli import main
from gateway.config.loader import load_config
from gateway.config.yamlsrc import read_yaml
from gateway.feedback.capture import load_dir
from gateway.feedback.signatures import GapSample
from gateway.offline.draft_check import draft_rules
from gateway.offline.draft_file import fixture_cases, render_rules
from gateway.offline.draft_file import render_fixtures as render_draft_fixtures
from gateway.offline.openapi import parse
from gateway.offline.probe import Probe
from gateway.offline.starter import build, path_glob, render_fixtures
from gateway.offline.suggest import (
    DEFAULT_PATHS,
    Draft,
    Sample,
    candidates,
    groups_of,
    sample_from_gap,
    samples_from_captures,
)
from gateway.offline.yaml_writer import (
    Comment,
    Mapping,
    Sequence,
    UnsafeYaml,
    comment,
    emit,
    flow,
    verify,
)
from gateway.serve.admin import admin_get
from tests.support.gateway import StartUpstream, supervised, write_config
from tests.support.ports import free_port

RULE_LINES = (
    "  - id: injected",
    "    match: {status: [418]}",
    "    error: {code: OWNED, category: CONFLICT}",
    "  # ",
)


def injection(separator: str) -> str:
    """A whole rule, its lines joined by `separator`: where a writer lets the separator end
    a comment (on main, `suggest` did for U+2028, U+2029 and U+0085), the rule is in."""
    return separator.join(("a", *RULE_LINES))


HOSTILE: dict[str, str] = {
    "line-separator": injection("\u2028"),
    "paragraph-separator": injection("\u2029"),
    "next-line": injection("\x85"),
    "line-feed": injection("\n"),
    "carriage-return": injection("\r"),
    "tab": "a\tb",
    "nul": "a\x00b",
    "escape": "\x1b[31mred",
    "bom": "\ufeffa",
    "bidi-override": "a\u202eb\u2066c",
    "zero-width": "a\u200bb",
    "comment": "a # b",
    "mapping-indicator": "a: b",
    "sequence-indicator": "- a",
    "flow-indicators": "a, b] {c}",
    "quotes": "'a\" \\b",
    "anchor-alias-tag": "&a *b !c",
    "directive": "%YAML 1.1",
    "document-markers": "---\n...",
    "keywords": "null",
    "boolean": "yes",
    "number": "0x1F",
    "block-scalar": "|\n  x",
    "backtick-at": "`a` @b",
    "spaces": "  a  ",
    "private-use": "\ue000",
    "astral": "\U0001f600\U0010ffff",
    "backslash-u": "\\u2028",
}
IDS = list(HOSTILE)
UNPRINTABLE_IN_YAML = ("\u2028", "\u2029", "\x85", "\r")


def assert_no_line_break_hidden(text: str) -> None:
    """No character a YAML parser or an editor reads as a line break, except line feeds, and
    nothing unprintable in a comment."""
    for ch in UNPRINTABLE_IN_YAML:
        assert ch not in text, f"{ch!r} written raw"
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            assert line.isprintable(), f"unprintable character in comment {line!r}"


def expected_rule(draft: Draft) -> dict[str, Any]:
    match: dict[str, Any] = {"routes": [draft.route], "status": [draft.status], "path": draft.path}
    if draft.pattern is not None and draft.json_path is not None:
        match["json"] = {"path": draft.json_path, "regex": draft.pattern}
    elif draft.pattern is not None:
        match["body"] = draft.pattern
    error: dict[str, Any] = {"code": draft.code, "category": draft.category.value}
    return {"id": draft.id, "match": match, "error": error}


def loaded_rules(text: str, tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "drafts.yaml"
    path.write_text(text)
    rules = read_yaml(str(path)).data["rules"]
    assert isinstance(rules, list)
    for rule in rules:
        rule["error"].pop("fix_required", None)
    return rules


@pytest.mark.parametrize("value", HOSTILE.values(), ids=IDS)
def test_suggest_writes_exactly_the_drafts(value: str, tmp_path: Path) -> None:
    samples = [
        Sample(
            route=f"api{value}",
            method="GET",
            path=f"/items/{value}/{n}",
            status=404,
            content_type="application/json",
            body=json.dumps({"message": f"no item {value} {n}"}),
            message=f"no item {value} {n}",
        )
        for n in (1, 2)
    ]
    kept = GapSample("GET", f"/{value}", 409, None, ((value, value),), value, False, value)
    from_gap = sample_from_gap(value, 3, kept)
    assert from_gap is not None
    samples.append(from_gap)
    codes: set[str] = set()
    drafts = [candidates(group, DEFAULT_PATHS, codes)[0] for group in groups_of(samples)]
    assert drafts
    text = render_rules(drafts, [value], value, [value])
    assert_no_line_break_hidden(text)
    assert loaded_rules(text, tmp_path) == [expected_rule(d) for d in drafts]
    fixtures = tmp_path / "drafts.fixtures.yaml"
    fixtures.write_text(render_draft_fixtures(drafts, value))
    assert read_yaml(str(fixtures)).data == {"cases": fixture_cases(drafts)}


def hostile_document(value: str) -> dict[str, Any]:
    """An OpenAPI document whose title, paths, operation ids, descriptions and examples hold
    `value`: an upstream controls all of them."""
    error = {
        "description": f"The order {value} was already paid",
        "content": {
            "application/json": {"example": {"error": {"code": "ALREADY_PAID", "message": value}}}
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": value, "version": value},
        "paths": {
            f"/orders/{value}/{{id}}": {
                "post": {"operationId": f"pay{value}", "responses": {"409": error}},
                "get": {"operationId": value, "responses": {"404": {"description": value}}},
            }
        },
    }


@pytest.mark.parametrize("value", HOSTILE.values(), ids=IDS)
def test_init_writes_exactly_the_starter(value: str, tmp_path: Path) -> None:
    document = parse(hostile_document(value))
    probe = Probe("/probe", 404, ("express",), evidence=value)
    upstream = "http://127.0.0.1:9"
    starter = build(upstream, document, value, probe, ["express"])
    assert_no_line_break_hidden(starter.config)
    path = tmp_path / "gateway.yaml"
    path.write_text(starter.config)
    loaded = read_yaml(str(path)).data
    route = loaded["routes"][0]
    assert route["upstream"] == upstream
    assert route["operations"] == [
        {"method": op.method, "path": op.path, "name": op.operation_id}
        for op in document.operations
    ]
    assert [r["id"] for r in loaded["rules"]] == [r.id for r in starter.rules]
    assert [r["match"]["path"] for r in loaded["rules"]] == [
        path_glob(r.operation.path) for r in starter.rules
    ]
    assert loaded["include"] == ["builtin:express"]
    assert set(loaded) == {"listen", "admin", "admin_token_file", "include", "routes", "rules"}
    assert route["mode"] == "headers" and route["capture"]["only"] == "unmatched"
    fixtures = tmp_path / "gateway.fixtures.yaml"
    fixtures.write_text(render_fixtures(starter, value, value))
    assert read_yaml(str(fixtures)).data == {"cases": starter.fixtures}


@pytest.mark.parametrize("value", HOSTILE.values(), ids=IDS)
def test_the_writer_round_trips_keys_values_and_comments(value: str) -> None:
    document = Mapping().note(value).add(value or "k", [value, {value: value}]).add("v", value)
    text = emit(document, (value,))
    assert_no_line_break_hidden(text)
    assert yaml.safe_load(text) == {value or "k": [value, {value: value}], "v": value}
    assert "\n" not in flow(value) and comment(value).isprintable()


def test_a_text_that_does_not_load_back_is_refused() -> None:
    """The last line of defence holds on its own: the hand-written layout that let a rule in
    (a raw U+2028 in a comment) is refused, and so is a value left unquoted."""
    rule = {"id": "a", "match": {"status": [404]}}
    raw = f"rules:\n  # GET /x{injection(chr(0x2028))}\n  - id: a\n    match: {{status: [404]}}\n"
    with pytest.raises(UnsafeYaml):
        verify(raw, {"rules": [rule]})
    with pytest.raises(UnsafeYaml):
        verify("routes: [a, b]\n", {"routes": ["a, b"]})
    verify(
        emit(Mapping().add("rules", Sequence([Comment("GET /x\u2028"), rule]))), {"rules": [rule]}
    )


def echo_app() -> web.Application:
    """An upstream whose 404 message quotes the path it was asked for, as many do."""

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"message": f"no route for {request.path}"}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


def is_refused(value: str) -> bool:
    """A control character (Unicode's Cc) in a decoded path is the gateway's own 400."""
    return any(unicodedata.category(ch) == "Cc" for ch in value)


async def draft_and_load(
    source: str, config: Path, out: Path, tmp_path: Path
) -> list[dict[str, Any]]:
    argv = ["suggest", "--from", source, "--config", str(config), "--out", str(out), "--force"]
    assert await asyncio.to_thread(main, argv) == 0
    text = await asyncio.to_thread(out.read_text)
    assert_no_line_break_hidden(text)
    return loaded_rules(text, tmp_path)


async def test_a_client_path_adds_nothing_to_the_drafts(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """Through a real gateway process in `headers` mode with capture: the path of every
    hostile request is captured decoded, and `suggest` (from the captures and from `/gaps`)
    writes drafts that load as exactly the rules meant, and that `check` accepts. (Whether
    each draft wins its own samples, which `mendpoint test` checks, is the drafting's
    business, not the writer's: tests/offline/test_suggest.py.)"""
    upstream = await start_upstream(echo_app())
    captures = tmp_path / "captures"
    admin = f"127.0.0.1:{free_port()}"
    listen = f"127.0.0.1:{free_port()}"
    route = {"name": "api", "prefix": "/", "upstream": upstream, "mode": "headers"}
    capture = {"dir": str(captures), "max_files": 1000}
    config = write_config(
        tmp_path, {"listen": listen, "admin": admin, "routes": [{**route, "capture": capture}]}
    )
    async with supervised(config, admin, tmp_path, workers=None):
        async with aiohttp.ClientSession() as session:
            for value in HOSTILE.values():
                quoted = urllib.parse.quote(f"/files/{value}", safe="/")
                url = URL(f"http://{listen}{quoted}", encoded=True)
                async with session.get(url) as response:
                    assert response.status == (400 if is_refused(value) else 404), value
        from_gaps = await draft_and_load(admin, config, tmp_path / "from-gaps.yaml", tmp_path)
        gaps = await asyncio.to_thread(admin_get, admin, "/gaps?limit=200&window_s=10800", None)
    assert isinstance(gaps, dict)
    loaded = load_config(str(config))
    kept = [GapSample.from_record(row["sample"]) for row in gaps["signatures"]]
    signatures = [
        sample_from_gap(row["route"], row["count"], sample)
        for row, sample in zip(gaps["signatures"], kept, strict=True)
        if sample is not None and not row["covered_by"]
    ]
    expected = (await draft_rules([s for s in signatures if s is not None], loaded)).drafts
    assert expected
    assert from_gaps == [expected_rule(d) for d in expected]

    samples, _ = samples_from_captures(load_dir(str(captures)))
    assert {s.path for s in samples} == {
        f"/files/{v}" for v in HOSTILE.values() if not is_refused(v)
    }
    drafts = tmp_path / "from-captures.yaml"
    expected = (await draft_rules(samples, loaded)).drafts
    assert await draft_and_load(str(captures), config, drafts, tmp_path) == [
        expected_rule(d) for d in expected
    ]
    checked = write_config(tmp_path, {"include": [str(drafts)], "routes": [route]}, "check.yaml")
    assert await asyncio.to_thread(main, ["check", "--config", str(checked)]) == 0
