"""The rule language for real APIs: several `json:` conditions, wildcard paths, `fields:`,
messages that name every field, and where the upstream's own message is looked for."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import regex
import yaml
from aiohttp import web

from gateway.classify import Classifier, Observation, ObservationKind
from gateway.classify.fields import MAX_FIELDS
from gateway.classify.timed_search import may_name_groups
from gateway.config.errors import ConfigError
from gateway.config.jsonpath import MAX_VISITS, Wild, parse_json_path
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.offline.fixtures import load_fixtures, run_fixtures
from tests.support.gateway import StartGateway, StartUpstream, route_config

FASTAPI_422 = {
    "detail": [
        {"type": "missing", "loc": ["body", "quantity"], "msg": "Field required", "input": {}},
        {
            "type": "string_type",
            "loc": ["body", "name"],
            "msg": "Input should be a valid string",
            "input": 5,
        },
    ]
}
DRF_400 = {"name": ["This field may not be blank."], "email": ["Enter a valid email address."]}
ASPNET_400 = {
    "type": "https://tools.ietf.org/html/rfc9110#section-15.5.1",
    "title": "One or more validation errors occurred.",
    "status": 400,
    "errors": {"Name": ["The Name field is required."], "Age": ["Must be positive.", "Too big."]},
}
AIP193_400 = {
    "error": {
        "code": 400,
        "message": "Request contains an invalid argument.",
        "status": "INVALID_ARGUMENT",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "BAD"},
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": "book.title", "description": "must not be empty"}],
            },
        ],
    }
}
STRIPE_400 = {
    "error": {"type": "invalid_request_error", "param": "amount", "message": "Invalid integer: x"}
}

FASTAPI_FIELDS = {"each": "detail[*]", "field": "loc", "message": "msg"}
KEYED_FIELDS = {"each": "*[*]"}


def loaded_with(tmp_path: Path, rules: list[dict[str, Any]], **extra: Any) -> LoadedConfig:
    config = {
        "routes": [{"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}],
        "rules": rules,
        **extra,
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return load_config(str(path))


def problems_of(tmp_path: Path, rules: list[dict[str, Any]], **extra: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        loaded_with(tmp_path, rules, **extra)
    return [str(p) for p in caught.value.problems]


def rule(match: dict[str, Any], rule_id: str = "r", **error: Any) -> dict[str, Any]:
    error = {"code": "CUSTOM", "category": "VALIDATION_ERROR", **error}
    return {"id": rule_id, "match": {"status": [400, 422], **match}, "error": error}


def observe(body: Any, status: int = 400, **kw: Any) -> Observation:
    raw = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    return Observation(
        route="api",
        method="POST",
        path="/x",
        kind=ObservationKind.STATUS,
        status=status,
        body=raw,
        **kw,
    )


def classify(loaded: LoadedConfig, body: Any, status: int = 400) -> Any:
    verdict = Classifier(loaded).classify(observe(body, status))
    assert verdict is not None
    return verdict


# --- the path language ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("detail.0.msg", ("detail", 0, "msg")),
        ("detail[*].msg", ("detail", Wild(), "msg")),
        ("detail.*.msg", ("detail", Wild(), "msg")),
        ("errors.{field}[*]", ("errors", Wild("field"), Wild())),
        ("[0].a", (0, "a")),
        ("error.details[1]", ("error", "details", 1)),
        ("@type", ("@type",)),
    ],
    ids=["numeric", "bracket-star", "dot-star", "named-key", "top-list", "bracket-index", "at"],
)
def test_paths_parse(text: str, steps: tuple[Any, ...]) -> None:
    assert parse_json_path(text).steps == steps


@pytest.mark.parametrize("text", ["", "a..b", "a[x]", "a{b}", "{1x}", "a.{f}.{f}", " a", "a["])
def test_bad_paths_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"JSON path|segment|must|bound twice|mixes"):
        parse_json_path(text)


def test_a_wildcard_walk_is_bounded() -> None:
    body = {"detail": [{"msg": str(i)} for i in range(100_000)]}
    began = time.perf_counter()
    found = list(parse_json_path("detail[*].msg").find(body))
    assert 0 < len(found) < MAX_VISITS
    assert time.perf_counter() - began < 0.5


# --- json conditions --------------------------------------------------------------------


def test_every_json_condition_must_hold(tmp_path: Path) -> None:
    both = rule(
        {
            "json": [
                {"path": "error.type", "equals": "invalid_request_error"},
                {"path": "error.param", "regex": "^(?P<param>amount|currency)$"},
            ]
        },
        message="Bad {param}",
    )
    loaded = loaded_with(tmp_path, [both])
    verdict = classify(loaded, STRIPE_400)
    assert (verdict.rule.id, verdict.failure.message) == ("r", "Bad amount")
    other_param = {"error": {**STRIPE_400["error"], "param": "source"}}
    assert classify(loaded, other_param).rule.id != "r"
    other_type = {"error": {**STRIPE_400["error"], "type": "card_error"}}
    assert classify(loaded, other_type).rule.id != "r"


def test_a_wildcard_condition_holds_when_any_item_matches(tmp_path: Path) -> None:
    loaded = loaded_with(
        tmp_path, [rule({"json": {"path": "detail[*].type", "equals": "string_type"}})]
    )
    assert classify(loaded, FASTAPI_422, 422).rule.id == "r"
    only_missing = {"detail": FASTAPI_422["detail"][:1]}
    assert classify(loaded, only_missing, 422).rule.id != "r"


def test_a_header_regexs_named_groups_are_captures(tmp_path: Path) -> None:
    """`check` takes a header regex's named groups as captures (for placeholders and a retry
    `capture`): the failure is filled from them. On c837dd3 the header's match was thrown
    away and filling `{scope}` raised KeyError, so the step fell open on every such failure."""
    headers = {
        "WWW-Authenticate": 'Bearer error="insufficient_scope", scope="(?P<scope>[^"]+)"',
        "X-Wait": r"^(?<wait>\d+)s$",
        "Content-Type": "(?i)json",  # no named group: nothing read from its match
    }
    spec = rule(
        {"status": [403], "headers": headers, "methods": ["GET"]},
        message="the token lacks {scope}",
        retryable=True,
        retry_after_ms={"capture": "wait", "hints": False},
    )
    obs = Observation(
        route="api",
        method="GET",
        path="/x",
        kind=ObservationKind.STATUS,
        status=403,
        headers={
            "www-authenticate": 'Bearer error="insufficient_scope", scope="orders:write"',
            "x-wait": "7s",
            "content-type": "application/json",
        },
        body=b"{}",
    )
    verdict = Classifier(loaded_with(tmp_path, [spec])).classify(obs)
    assert verdict is not None and verdict.rule.id == "r"
    assert verdict.failure.message == "the token lacks orders:write"
    assert verdict.failure.retry_after_ms == 7000
    assert dict(verdict.captures) == {"scope": "orders:write", "wait": "7"}


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("(?P<a>x)", True),
        ("(?<a>x)", True),
        ("(?i)(?P<a>x)", True),
        ("(?i)json|xml", False),
        ("(?<=Bearer )token(?<!x)", False),
        ("(x)|(?:y)", False),
    ],
)
def test_a_pattern_that_names_no_group_is_known_from_its_text(pattern: str, names: bool) -> None:
    assert may_name_groups(pattern) is names
    assert bool(regex.compile(pattern).groupindex) is names


def test_a_named_wildcard_captures_the_key(tmp_path: Path) -> None:
    keyed = rule(
        {"json": {"path": "errors.{field}[*]", "regex": "(?P<why>positive)"}},
        message="{field} is wrong: must be {why}",
        fix_required="Correct {field}, then reissue",
    )
    verdict = classify(loaded_with(tmp_path, [keyed]), ASPNET_400)
    assert verdict.failure.message == "Age is wrong: must be positive"
    assert verdict.failure.fix_required == "Correct Age, then reissue"


def test_json_conditions_are_checked_at_load_with_their_lines(tmp_path: Path) -> None:
    bad = rule({"json": [{"path": "a"}, {"path": "b", "regex": "("}, {"path": "c..d"}]})
    problems = problems_of(tmp_path, [bad])
    assert any("rules[0].match.json[2].path" in p and "c..d" in p for p in problems), problems
    unbound = rule({"json": {"path": "errors.*"}}, message="{field}")
    [problem] = problems_of(tmp_path, [unbound])
    assert "placeholder(s) ['field']" in problem and "gw.yaml:16: rules[0].error.message" in problem
    empty = rule({"json": []})
    assert any("at least one condition" in p for p in problems_of(tmp_path, [empty]))


def test_a_bad_regex_in_a_listed_condition_names_its_index(tmp_path: Path) -> None:
    bad = rule({"json": [{"path": "a"}, {"path": "b", "regex": "("}]})
    [problem] = problems_of(tmp_path, [bad])
    assert "rules[0].match.json[1].regex" in problem and "invalid regex" in problem


# --- error.fields and messages that name them -------------------------------------------

FIELD_CASES = {
    "fastapi": (
        FASTAPI_FIELDS,
        FASTAPI_422,
        [
            ("body.quantity", "Field required"),
            ("body.name", "Input should be a valid string"),
        ],
    ),
    "drf": (
        KEYED_FIELDS,
        DRF_400,
        [("name", "This field may not be blank."), ("email", "Enter a valid email address.")],
    ),
    "aspnet": (
        {"each": "errors.*[*]"},
        ASPNET_400,
        [
            ("Name", "The Name field is required."),
            ("Age", "Must be positive."),
            ("Age", "Too big."),
        ],
    ),
    "aip-193": (
        {
            "each": "error.details[*].fieldViolations[*]",
            "field": "field",
            "message": "description",
        },
        AIP193_400,
        [("book.title", "must not be empty")],
    ),
    "stripe": (
        {"each": "error", "field": "param", "message": "message"},
        STRIPE_400,
        [("amount", "Invalid integer: x")],
    ),
}


@pytest.mark.parametrize(("spec", "body", "expected"), FIELD_CASES.values(), ids=FIELD_CASES)
def test_fields_are_extracted_and_named_in_the_message(
    tmp_path: Path, spec: dict[str, str], body: Any, expected: list[tuple[str, str]]
) -> None:
    loaded = loaded_with(tmp_path, [rule({}, fields=spec)])
    failure = classify(loaded, body).failure
    assert [(f.field, f.message) for f in failure.fields] == expected
    assert failure.message == "; ".join(f"{f}: {m}" for f, m in expected)


def test_the_fastapi_message_reads_as_documented(tmp_path: Path) -> None:
    loaded = loaded_with(tmp_path, [rule({}, fields=FASTAPI_FIELDS)])
    failure = classify(loaded, FASTAPI_422, 422).failure
    assert failure.message == (
        "body.quantity: Field required; body.name: Input should be a valid string"
    )


def test_no_fields_when_the_upstream_names_none(tmp_path: Path) -> None:
    loaded = loaded_with(tmp_path, [rule({}, fields=[FASTAPI_FIELDS, KEYED_FIELDS])])
    failure = classify(loaded, {"detail": "Not authenticated"}).failure
    assert failure.fields == ()
    assert failure.message == "Not authenticated"


def test_the_first_fields_spec_that_finds_some_wins(tmp_path: Path) -> None:
    loaded = loaded_with(tmp_path, [rule({}, fields=[FASTAPI_FIELDS, KEYED_FIELDS])])
    assert [f.field for f in classify(loaded, DRF_400).failure.fields] == ["name", "email"]
    fastapi = classify(loaded, FASTAPI_422).failure.fields
    assert [f.field for f in fastapi] == ["body.quantity", "body.name"]


def test_fields_and_their_message_are_bounded(tmp_path: Path) -> None:
    many = {f"field_{i}": ["x" * 5000 + "\u202e\x1b[31m"] for i in range(500)}
    loaded = loaded_with(tmp_path, [rule({}, fields=KEYED_FIELDS)])
    failure = classify(loaded, many).failure
    assert len(failure.fields) == MAX_FIELDS
    assert all(len(f.message) <= 300 and "\x1b" not in f.message for f in failure.fields)
    assert len(failure.message) <= 1000
    assert failure.message.endswith("more")
    assert "field_0: " in failure.message


def test_a_template_can_name_the_fields(tmp_path: Path) -> None:
    templated = rule(
        {}, fields=KEYED_FIELDS, message="Invalid input ({fields})", fix_required="Fix {fields}"
    )
    failure = classify(loaded_with(tmp_path, [templated]), DRF_400).failure
    assert failure.message == (
        "Invalid input (name: This field may not be blank.; email: Enter a valid email address.)"
    )
    unbound = rule({}, message="{fields}")
    [problem] = problems_of(tmp_path, [unbound])
    assert "placeholder(s) ['fields']" in problem


def test_a_bad_fields_path_is_a_located_problem(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, [rule({}, fields={"each": "detail[", "message": "msg"})])
    assert any("rules[0].error.fields.each" in p for p in problems), problems


# --- where the upstream's message is looked for -----------------------------------------


def test_message_paths_replace_the_defaults(tmp_path: Path) -> None:
    loaded = loaded_with(tmp_path, [rule({})], message_paths=["problem.text"])
    assert classify(loaded, {"message": "default path"}).failure.message == "Bad Request"
    assert classify(loaded, {"problem": {"text": "mine"}}).failure.message == "mine"


def test_extra_message_paths_come_before_the_defaults(tmp_path: Path) -> None:
    loaded = loaded_with(tmp_path, [rule({})], extra_message_paths=["problem.text"])
    assert classify(loaded, {"message": "default path"}).failure.message == "default path"
    both = {"message": "generic", "problem": {"text": "specific"}}
    assert classify(loaded, both).failure.message == "specific"


def test_a_wildcard_message_path_joins_what_it_finds(tmp_path: Path) -> None:
    loaded = loaded_with(tmp_path, [rule({})], extra_message_paths=["detail[*].msg"])
    message = classify(loaded, FASTAPI_422, 422).failure.message
    assert message == "Field required; Input should be a valid string"


def test_a_bad_message_path_is_refused(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, [], extra_message_paths=["a..b"])
    assert any("extra_message_paths" in p for p in problems), problems


# --- fixtures ---------------------------------------------------------------------------


def test_fixture_json_is_compact_like_framework_output(tmp_path: Path) -> None:
    """A regex copied from real traffic (`"type":"missing"`, no spaces) matches a fixture."""
    copied = rule({"body": r'"type":"missing","loc":\["body","(?P<name>\w+)"\]'}, message="{name}")
    loaded = loaded_with(tmp_path, [copied])
    fixtures = load_fixtures(
        yaml.safe_dump(
            {
                "cases": [
                    {
                        "name": "fastapi",
                        "request": {"method": "POST", "path": "/items"},
                        "response": {"status": 422, "json": FASTAPI_422},
                        "expect": {"rule": "r", "message": "quantity"},
                    },
                    {
                        "name": "raw",
                        "response": {
                            "status": 400,
                            "content_type": "application/json",
                            "body": '{"name":["This field may not be blank."]}',
                        },
                        # Not rule r; the shipped DRF rule reads the raw body as sent.
                        "expect": {
                            "rule": "django-drf-field-errors",
                            "message": "name: This field may not be blank.",
                        },
                    },
                ]
            },
            sort_keys=False,
        ),
        "fixtures.yaml",
    )
    results = run_fixtures(loaded, fixtures)
    assert [r.mismatches for r in results] == [(), ()]


def test_fixture_expectations_cover_fields(tmp_path: Path) -> None:
    loaded = loaded_with(tmp_path, [rule({}, fields=KEYED_FIELDS)])
    case = {
        "name": "drf",
        "response": {"status": 400, "json": {"name": ["blank"]}},
        "expect": {"fields": [{"field": "name", "message": "wrong"}]},
    }
    [result] = run_fixtures(loaded, load_fixtures(yaml.safe_dump({"cases": [case]}), "f"))
    assert result.mismatches == (
        "fields: expected [{'field': 'name', 'message': 'wrong'}], "
        "got [{'field': 'name', 'message': 'blank'}]",
    )


def test_a_fixture_cannot_give_both_body_and_json() -> None:
    text = (
        "cases:\n  - name: x\n    response: {status: 400, body: '{}', json: {}}\n    expect: {}\n"
    )
    with pytest.raises(ConfigError, match="either body"):
        load_fixtures(text, "f.yaml")


# --- through the proxy ------------------------------------------------------------------


async def test_fields_reach_the_envelope_and_additive_bodies(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    async def fastapi_like(request: web.Request) -> web.Response:
        return web.Response(
            status=422,
            body=json.dumps(FASTAPI_422, separators=(",", ":")),
            content_type="application/json",
        )

    app = web.Application()
    app.router.add_post("/items", fastapi_like)
    upstream = await start_upstream(app)
    fields_rule = rule({"status": [422]}, rule_id="fastapi-422", fields=FASTAPI_FIELDS)
    gateway = await start_gateway({**route_config(upstream), "rules": [fields_rule]})
    expected = [
        {"field": "body.quantity", "message": "Field required"},
        {"field": "body.name", "message": "Input should be a valid string"},
    ]
    for mode in ("envelope", "additive"):
        async with await gateway.request(
            "POST", "/items", json={}, headers={"X-Error-Format": mode}
        ) as answer:
            body = await answer.json()
        assert answer.status == 422
        assert body["error"]["fields"] == expected
        assert body["error"]["message"].startswith("body.quantity: Field required; body.name")
        if mode == "additive":
            assert body["detail"] == FASTAPI_422["detail"]  # the original members survive


# --- values the request sent (docs/rules.md#values-the-request-sent) --------------------


ANOTHER = "Send another value for"
ECHO_RULE = rule(
    {"status": [500], "request_echoed": True},
    rule_id="echoed",
    fix_required="Send another value for {parameter}",
)
NOT_ECHOED_RULE = rule({"status": [500], "request_echoed": False}, rule_id="not-echoed")


@pytest.mark.parametrize(
    ("path", "query", "text", "fix"),
    [
        ("/items", "id=abc", 'For input string: "abc"', "Send another value for id"),
        ("/items", "id=abc", "For input string: &quot;abc&quot;", "Send another value for id"),
        ("/items", "id=abcd", "cannot parse abcd as a number", "Send another value for id"),
        ("/orders/7x", "", "invalid literal for int(): '7x'", f"{ANOTHER} path segment 2"),
        # The query's value before a path segment the page names as its resource.
        ("/items", "id=abc", '{"servlet":"items","cause":"bad abc"}', "Send another value for id"),
    ],
    ids=["quoted", "html-quoted", "unquoted", "path-segment", "query-first"],
)
def test_request_echoed_names_the_value_the_text_repeats(
    tmp_path: Path, path: str, query: str, text: str, fix: str
) -> None:
    loaded = loaded_with(tmp_path, [ECHO_RULE, NOT_ECHOED_RULE])
    obs = Observation(
        route="api",
        method="GET",
        path=path,
        query=query,
        kind=ObservationKind.STATUS,
        status=500,
        body=text.encode(),
    )
    verdict = Classifier(loaded).classify(obs)
    assert verdict is not None
    assert (verdict.rule.id, verdict.failure.fix_required) == ("echoed", fix)


@pytest.mark.parametrize(
    ("path", "query", "text"),
    [
        ("/items", "id=42", 'For input string: "n/a"'),  # quotes something not sent
        ("/items", "id=ab", "cannot parse ab"),  # two characters, unquoted: too common
    ],
    ids=["not-sent", "short-unquoted"],
)
def test_request_echoed_false_holds_when_nothing_sent_is_repeated(
    tmp_path: Path, path: str, query: str, text: str
) -> None:
    loaded = loaded_with(tmp_path, [ECHO_RULE, NOT_ECHOED_RULE])
    obs = Observation(
        route="api",
        method="GET",
        path=path,
        query=query,
        kind=ObservationKind.STATUS,
        status=500,
        body=text.encode(),
    )
    verdict = Classifier(loaded).classify(obs)
    assert verdict is not None and verdict.rule.id == "not-echoed"


async def test_two_requests_differing_only_in_the_query_never_share_an_answer(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """The answer cache keys on the query string: the second request's answer names its own
    parameter, not the first's cached one."""

    async def tomcat_like(request: web.Request) -> web.Response:
        text = 'java.lang.NumberFormatException: For input string: "abc"'
        return web.Response(status=500, text=text)

    app = web.Application()
    app.router.add_get("/items", tomcat_like)
    upstream = await start_upstream(app)
    gateway = await start_gateway({**route_config(upstream), "rules": [ECHO_RULE]})
    seen = []
    for query in ("id=abc", "sku=abc", "id=abc", "other=1"):
        headers = {"X-Error-Format": "envelope"}
        async with await gateway.request("GET", f"/items?{query}", headers=headers) as answer:
            error = (await answer.json())["error"]
        seen.append((error["code"], error.get("fix_required")))
    assert seen == [
        ("CUSTOM", "Send another value for id"),
        ("CUSTOM", "Send another value for sku"),
        ("CUSTOM", "Send another value for id"),
        ("UPSTREAM_INTERNAL_ERROR", None),
    ]
