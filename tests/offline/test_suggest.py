"""Captures and `mendpoint suggest`: from shadow traffic in front of the demo API to drafts
that `check` and `test` accept and that classify every captured failure."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import regex
import yaml
from aiohttp import web
from multidict import CIMultiDict

from examples.demo_api import build_app
from gateway.classify import Classifier, Observation, ObservationKind
from gateway.cli import main
from gateway.config.loader import load_config
from gateway.feedback.capture import SUFFIX, load_dir
from gateway.offline.suggest import DEFAULT_PATHS, Sample, candidates, common_glob, groups_of
from gateway.serve.generation import CAPTURES
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream, route_config
from tests.support.legacy_api import XML_403

# A burst of mixed traffic: successes and every kind of failure the demo API has, with
# varying ids and bodies (the "minute of traffic", compressed into one round).
TRAFFIC: list[tuple[str, str, Any]] = [
    *(("GET", f"/v1/items/{n}", None) for n in (7, 42, 1234, 99999)),
    ("GET", "/v1/items", None),
    ("GET", "/health", None),
    *(("POST", "/v1/orders", body) for body in ({}, {"quantity": 0}, {"quantity": -3})),
    ("POST", "/v1/orders", {"quantity": 2}),
    ("DELETE", "/v1/items/1", None),
    ("DELETE", "/v1/items/2", None),
    ("GET", "/v1/report", None),
    ("GET", "/v1/search", None),
    ("GET", "/v1/status", None),
]


async def send_traffic(gateway: RunningGateway) -> list[int]:
    statuses = []
    for _ in range(3):
        for method, path, body in TRAFFIC:
            async with await gateway.request(method, path, json=body) as response:
                await response.read()
                statuses.append(response.status)
    return statuses


async def shadow_gateway(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    captures: Path,
    **capture: str,
) -> RunningGateway:
    upstream = await start_upstream(build_app())
    spec = {"dir": str(captures), **capture}
    config = route_config(upstream, name="demo", mode="headers", capture=spec)
    return await start_gateway(config)


async def test_capture_records_failures_only_redacted_and_bounded(
    start_gateway: StartGateway, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    captures = tmp_path / "captures"
    gateway = await shadow_gateway(start_gateway, start_upstream, captures, only="all")
    statuses = await send_traffic(gateway)
    await gateway.server.app[CAPTURES].flush()
    recorded = load_dir(str(captures))
    assert len(recorded) == sum(1 for s in statuses if s >= 400)
    assert all(r["response"]["status"] >= 400 for r in recorded)
    assert {r["route"] for r in recorded} == {"demo"}
    assert not list(captures.glob("*.part"))
    # A shipped shape pack names some of the demo API's failures: matched, not unmatched.
    assert any(not r["classified"]["default_rule"] for r in recorded)


async def test_capture_records_by_default_only_what_no_rule_named(
    start_gateway: StartGateway, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    everything, unmatched = tmp_path / "all", tmp_path / "unmatched"
    first = await shadow_gateway(start_gateway, start_upstream, everything, only="all")
    second = await shadow_gateway(start_gateway, start_upstream, unmatched)
    await send_traffic(first)
    await send_traffic(second)
    await first.server.app[CAPTURES].flush()
    await second.server.app[CAPTURES].flush()
    fallbacks = [r for r in load_dir(str(everything)) if r["classified"]["default_rule"]]
    recorded = load_dir(str(unmatched))
    assert recorded and all(r["classified"]["default_rule"] for r in recorded)
    assert len(recorded) == len(fallbacks)
    assert {r["classified"]["rule"] for r in recorded} <= {
        r["classified"]["rule"] for r in fallbacks
    }


async def test_secrets_in_an_error_body_never_reach_the_capture(
    start_gateway: StartGateway, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    async def leaky(request: web.Request) -> web.Response:
        body = {
            "message": "login failed for password=hunter2 with Bearer abcdefghijklmnop1234",
            "debug": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
            "aws": "AKIAIOSFODNN7EXAMPLE",
        }
        return web.json_response(body, status=400, headers={"WWW-Authenticate": "Bearer x"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", leaky)
    upstream = await start_upstream(app)
    captures = tmp_path / "captures"
    config = route_config(upstream, name="leaky", capture={"dir": str(captures), "max_files": 2})
    gateway = await start_gateway(config)
    for _ in range(4):
        async with await gateway.request("GET", "/login?token=s3cr3tvalue") as response:
            assert response.status == 400
    await gateway.server.app[CAPTURES].flush()
    files = list(captures.glob(f"*{SUFFIX}"))
    assert len(files) == 2  # max_files
    text = files[0].read_text()
    for secret in ("hunter2", "abcdefghijklmnop1234", "MIIEow", "AKIAIOSFODNN7EXAMPLE", "s3cr3t"):
        assert secret not in text
    assert "[REDACTED]" in text


async def test_suggest_drafts_pass_check_and_test_and_classify_every_capture(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    captures = tmp_path / "captures"
    gateway = await shadow_gateway(start_gateway, start_upstream, captures)
    await send_traffic(gateway)
    await gateway.server.app[CAPTURES].flush()

    running = tmp_path / "running.yaml"
    route = {"name": "demo", "prefix": "/", "upstream": "http://127.0.0.1:9"}
    running.write_text(yaml.safe_dump({"routes": [route]}))
    drafts = tmp_path / "drafts.yaml"
    argv = ["suggest", "--from", str(captures), "--config", str(running), "--out", str(drafts)]
    assert await asyncio.to_thread(main, argv) == 0
    said = capsys.readouterr().out
    assert "draft rule(s)" in said
    text = drafts.read_text()
    assert "retryable: true" not in text and "fix_command" not in text
    assert "review:" in text

    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"include": [str(drafts)], "routes": [route]}))
    assert await asyncio.to_thread(main, ["check", "--config", str(config)]) == 0
    fixtures = tmp_path / "fixtures" / "drafts.fixtures.yaml"
    assert await asyncio.to_thread(main, ["test", "--config", str(config), str(fixtures)]) == 0

    loaded = load_config(str(config))
    classifier = Classifier(loaded)
    left_to_shipped, drafted = 0, 0
    for capture in load_dir(str(captures)):
        if not capture["classified"]["default_rule"]:
            continue
        verdict = classifier.classify(observation(capture))
        assert verdict is not None
        if verdict.failure.retryable:
            left_to_shipped += 1  # 429 and 503: the shipped rule's retry advice stands
            assert not verdict.rule.id.startswith("draft-")
        else:
            assert verdict.rule.id.startswith("draft-"), capture["classified"]
            drafted += 1
    assert left_to_shipped == 6  # /v1/search and /v1/status, three rounds each
    assert drafted >= 9


def observation(capture: dict[str, Any]) -> Observation:
    response = capture["response"]
    headers = CIMultiDict(response["headers"])
    return Observation(
        route=capture["route"],
        method=capture["request"]["method"],
        path=capture["request"]["path"],
        kind=ObservationKind.STATUS,
        status=response["status"],
        headers=headers,
        body=response["body"].encode(),
        content_type=headers.get("Content-Type", ""),
        idempotent=capture["request"]["method"] in ("GET", "DELETE"),
    )


@pytest.mark.parametrize(
    ("paths", "glob"),
    [
        (["/v1/items/7", "/v1/items/42"], "/v1/items/*"),
        (["/v1/orders", "/v1/orders"], "/v1/orders"),
        (["/a/b/c", "/a/b"], "/a/b/**"),
        (["/x/1", "/y/2/3"], "/**"),
        (["/v2/", "/v2/"], "/v2/"),
        (["/v2/a/", "/v2/b"], "/v2/*"),
        (["/"], "/"),
        # One sample stands for every id: a number, a UUID, a hex id is a wildcard.
        (["/accounts/42"], "/accounts/*"),
        (["/a/123e4567-e89b-12d3-a456-426614174000/b"], "/a/*/b"),
        (["/v2/"], "/v2/"),
        (["/v2/library/alpine"], "/v2/library/alpine"),
    ],
)
def test_common_glob(paths: list[str], glob: str) -> None:
    assert common_glob(paths) == glob


def test_a_bad_source_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"routes": [{"name": "a", "upstream": "http://127.0.0.1:9"}]}))
    out = str(tmp_path / "d.yaml")
    argv = ["suggest", "--from", str(tmp_path / "nope"), "--config", str(config), "--out", out]
    assert main(argv) != 0
    assert "is no directory" in capsys.readouterr().err


def test_suggest_needs_the_running_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draft is tried with the config it will be included in: without one, none is written."""
    monkeypatch.delenv("MENDPOINT_CONFIG", raising=False)
    argv = ["suggest", "--from", str(tmp_path), "--out", str(tmp_path / "d.yaml")]
    assert main(argv) != 0
    assert "give --config FILE" in capsys.readouterr().err
    assert not (tmp_path / "d.yaml").exists()


# Error bodies in the shapes the issue found `suggest` blind to. The OCI distribution
# registry's (distribution/registry/api/errcode: `{"errors": [{code, message, detail}]}`,
# served at `/v2/` with the trailing slash), Falcon's `HTTPError.to_dict` (`title` and
# `description`) and an AWS JSON error (`__type` with its namespace, `message`).
REGISTRY_UNAUTHORIZED = {
    "errors": [{"code": "UNAUTHORIZED", "message": "authentication required", "detail": None}]
}


def _shapes_app() -> web.Application:
    async def base(request: web.Request) -> web.Response:
        return web.json_response(REGISTRY_UNAUTHORIZED, status=401)

    async def manifest(request: web.Request) -> web.Response:
        tag = request.match_info["tag"]
        error = {"code": "MANIFEST_UNKNOWN", "message": f"manifest unknown: {tag}", "detail": {}}
        return web.json_response({"errors": [error]}, status=404)

    async def things(request: web.Request) -> web.Response:
        size = request.match_info["size"]
        body = {"title": "Invalid parameter", "description": f"The size {size} is over 100."}
        return web.json_response(body, status=400)

    async def queue(request: web.Request) -> web.Response:
        body = {
            "__type": "com.amazonaws.sqs#QueueDoesNotExist",
            "message": "The specified queue does not exist.",
        }
        return web.json_response(body, status=400, content_type="application/x-amz-json-1.0")

    app = web.Application()
    app.router.add_get("/v2/", base)
    app.router.add_get("/v2/library/{name}/manifests/{tag}", manifest)
    app.router.add_get("/things/{size}", things)
    app.router.add_post("/queues/{name}", queue)
    return app


async def test_suggest_reads_the_common_shapes_codes_and_a_trailing_slash(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Drafts take their code from the body's own code field, match on the path that holds
    the message (`errors[*].message`, `description`), keep `/v2/`'s slash, and pass their
    own fixtures."""
    upstream = await start_upstream(_shapes_app())
    captures = tmp_path / "captures"
    config = route_config(upstream, name="api", mode="headers", capture={"dir": str(captures)})
    gateway = await start_gateway(config)
    requests = [
        ("GET", "/v2/"),
        ("GET", "/v2/library/alpine/manifests/latest"),
        ("GET", "/v2/library/redis/manifests/7"),
        ("GET", "/things/140"),
        ("GET", "/things/999"),
        ("POST", "/queues/orders"),
        ("POST", "/queues/jobs"),
    ]
    for _ in range(2):
        for method, path in requests:
            async with await gateway.request(method, path) as response:
                await response.read()
                assert response.status >= 400
    await gateway.server.app[CAPTURES].flush()

    running = tmp_path / "running.yaml"
    route = {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}
    running.write_text(yaml.safe_dump({"routes": [route]}))
    drafts = tmp_path / "drafts.yaml"
    argv = ["suggest", "--from", str(captures), "--config", str(running), "--out", str(drafts)]
    assert await asyncio.to_thread(main, argv) == 0
    capsys.readouterr()
    rules = {rule["error"]["code"]: rule for rule in yaml.safe_load(drafts.read_text())["rules"]}
    assert set(rules) == {"UNAUTHORIZED", "MANIFEST_UNKNOWN", "THE_SIZE_IS_OVER"}, rules
    assert rules["UNAUTHORIZED"]["match"]["path"] == "/v2/"
    # Two tags, one code: one draft, matched on the code, over the common path.
    manifest = rules["MANIFEST_UNKNOWN"]["match"]
    assert manifest["path"] == "/v2/library/*/manifests/*"
    assert manifest["json"] == {"path": "errors[*].code", "regex": "^MANIFEST_UNKNOWN$"}
    falcon = [r for r in rules.values() if r["match"]["path"] == "/things/*"]
    assert len(falcon) == 1 and falcon[0]["match"]["json"]["path"] == "description"
    # The AWS error is left out: the shipped rules name AWS errors by the shape of `__type`.

    config_file = tmp_path / "gateway.yaml"
    config_file.write_text(yaml.safe_dump({"include": [str(drafts)], "routes": [route]}))
    assert await asyncio.to_thread(main, ["check", "--config", str(config_file)]) == 0
    fixtures = tmp_path / "fixtures" / "drafts.fixtures.yaml"
    argv = ["test", "--config", str(config_file), str(fixtures)]
    assert await asyncio.to_thread(main, argv) == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (
            {"errors": [{"code": "NAME_UNKNOWN", "message": "repository name not known"}]},
            "NAME_UNKNOWN",
        ),
        (
            {"__type": "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException"},
            "RESOURCE_NOT_FOUND_EXCEPTION",
        ),
        # A number, or digits in a string, only repeats the status: the words name the draft.
        ({"code": 404, "message": "Widget 7 is gone"}, "WIDGET_IS_GONE"),
        ({"code": "404", "message": "Widget 7 is gone"}, "WIDGET_IS_GONE"),
        # The older APIs' spelling (Salesforce, many Java and .NET ones).
        (
            {"errorCode": "INVALID_SESSION_ID", "errorMessage": "Session expired"},
            "INVALID_SESSION_ID",
        ),
    ],
)
def test_a_draft_is_named_by_the_upstreams_own_code(body: dict[str, Any], code: str) -> None:
    message = str(body.get("message", ""))
    sample = Sample("api", "GET", "/widgets/7", 404, "application/json", json.dumps(body), message)
    [group] = groups_of([sample])
    assert {d.code for d in candidates(group, DEFAULT_PATHS, set())} == {code}


@pytest.mark.parametrize(
    ("body", "code", "element"),
    [
        (XML_403, "AUDIT_FORBIDDEN", "<code>AUDIT_FORBIDDEN</code>"),
        (
            '<?xml version="1.0"?><Error><Code>NoSuchKey</Code>'
            "<Message>The specified key does not exist.</Message></Error>",
            "NO_SUCH_KEY",
            "<Code>NoSuchKey</Code>",
        ),
        (
            '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>'
            "<soap:Fault><faultcode>soap:Client</faultcode><faultstring>Quota exhausted"
            "</faultstring></soap:Fault></soap:Body></soap:Envelope>",
            "CLIENT",
            "<faultcode>soap:Client</faultcode>",
        ),
    ],
)
def test_an_xml_draft_is_named_by_and_matched_on_the_code_element(
    body: str, code: str, element: str
) -> None:
    """The code an XML error states (`<code>`, S3's `<Code>`, SOAP's `<faultcode>`) names the
    draft and is what its first candidate matches, in the raw body: not only the message."""
    sample = Sample("api", "GET", "/audit", 403, "application/xml", body, "")
    [group] = groups_of([sample])
    first, *_ = candidates(group, DEFAULT_PATHS, set())
    assert (first.code, first.json_path, first.how) == (code, None, f"the body's {element}")
    assert first.pattern is not None and regex.search(first.pattern, body)
    assert regex.fullmatch(first.pattern, element)
