"""What the envelope copies (docs/configuration.md#what-the-envelope-copies, docs/security.md).

`meta.original` keeps the whole body, a bounded cut or none of it, as the route says; and
whatever the gateway copies out of a body (`message`, `fields`, `meta.original`) passes the
redaction step, while the upstream's own bytes and members are never touched. Real gateways
in front of real aiohttp upstreams, each request also sent direct to compare.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.classify.redact import Redactor
from gateway.config.loader import load_config
from gateway.config.models import RedactionSpec
from gateway.failure import Mode
from gateway.offline.explain import Sample, explain
from tests.support.gateway import StartGateway, StartUpstream, route_config, write_config

PASSWORD = "hunter2-Secret"
BEARER = "abcdefghijklmnop1234"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
PRIVATE_KEY = "MIIEowIBAAKCAQEAx4Rr"
SECRETS = (PASSWORD, BEARER, AWS_KEY, PRIVATE_KEY)
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PRIVATE_KEY}\n-----END RSA PRIVATE KEY-----"

DEBUG_PAGE = f"""<!doctype html>
<html><head><title>OperationalError at /orders</title></head>
<body><h1>OperationalError at /orders</h1>
<p>could not connect with password={PASSWORD} as Authorization: Bearer {BEARER}
using {AWS_KEY}</p>
<pre>{PEM}</pre></body></html>
"""
VALIDATION = {
    "detail": [
        {"loc": ["body", "password"], "msg": f"password={PASSWORD} is too weak", "type": "x"},
        {"loc": ["body", "key"], "msg": f"{AWS_KEY} is not yours", "type": "y"},
    ],
    "debug": f"Authorization: Bearer {BEARER}\n{PEM}",
    "config": {"password": PASSWORD},
}


async def leaky_upstream(start_upstream: StartUpstream) -> str:
    async def debug_page(request: web.Request) -> web.Response:
        return web.Response(status=500, text=DEBUG_PAGE, content_type="text/html")

    async def validation(request: web.Request) -> web.Response:
        return web.json_response(VALIDATION, status=422)

    app = web.Application()
    app.router.add_get("/debug", debug_page)
    app.router.add_post("/orders", validation)
    return await start_upstream(app)


async def get(url: str, method: str = "GET", **headers: str) -> tuple[int, str, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers) as answer,
    ):
        return answer.status, answer.headers.get("Content-Type", ""), await answer.read()


def copied(envelope: dict[str, Any]) -> str:
    """Everything the gateway copied out of the body, as one text to search."""
    return json.dumps(
        [envelope["error"]["message"], envelope["error"].get("fields"), envelope["meta"]],
        ensure_ascii=False,
    )


@pytest.mark.parametrize(
    ("path", "method", "code"),
    [("/debug", "GET", "UPSTREAM_INTERNAL_ERROR"), ("/orders", "POST", "VALIDATION_FAILED")],
    ids=["html debug page", "json validation error"],
)
async def test_no_secret_reaches_message_fields_or_meta_original(
    start_upstream: StartUpstream, start_gateway: StartGateway, path: str, method: str, code: str
) -> None:
    upstream = await leaky_upstream(start_upstream)
    gateway = await start_gateway(route_config(upstream, mode="envelope"))
    direct = await get(upstream + path, method)
    assert all(secret in direct[2].decode() for secret in SECRETS)  # the upstream leaks them
    status, content_type, body = await get(gateway.url + path, method)
    assert (status, content_type) == (direct[0], "application/json")
    envelope = json.loads(body)
    assert envelope["error"]["code"] == code
    text = copied(envelope)
    for secret in SECRETS:
        assert secret not in text, secret
    assert "[REDACTED]" in envelope["error"]["message"]
    # What is not a secret survives: the message still says what happened.
    assert "OperationalError" in text if path == "/debug" else "body.password" in text
    if path == "/orders":
        fields = envelope["error"]["fields"]
        assert [f["field"] for f in fields] == ["body.password", "body.key"]
        assert fields[0]["message"] == "password=[REDACTED] is too weak"
        assert envelope["meta"]["original"]["body"]["config"] == {"password": "[REDACTED]"}


async def test_additive_never_rewrites_the_upstreams_members(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """Only what the gateway adds is redacted; the upstream's own members are its own."""
    upstream = await leaky_upstream(start_upstream)
    gateway = await start_gateway(route_config(upstream))
    _, _, direct = await get(upstream + "/orders", "POST")
    status, _, body = await get(gateway.url + "/orders", "POST")
    merged = json.loads(body)
    assert status == 422
    assert {k: merged[k] for k in VALIDATION} == json.loads(direct) == VALIDATION
    added = json.dumps([merged["error"], merged["failure"]])
    for secret in SECRETS:
        assert secret not in added, secret
    # A browser's debug page passes byte for byte, secrets and all, as it would direct.
    accept = "text/html,application/xhtml+xml,*/*;q=0.8"
    page = await get(gateway.url + "/debug", Accept=accept)
    assert page[2] == (await get(upstream + "/debug", Accept=accept))[2]


async def test_a_json_clients_envelope_is_redacted_too(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await leaky_upstream(start_upstream)
    gateway = await start_gateway(route_config(upstream))
    status, content_type, body = await get(gateway.url + "/debug", Accept="application/json")
    assert (status, content_type) == (500, "application/json")
    text = copied(json.loads(body))
    assert all(secret not in text for secret in SECRETS)


LONG = {"message": "bad rows", "rows": [{"line": i, "why": "too many columns"} for i in range(300)]}


async def envelope_with(
    start_upstream: StartUpstream, start_gateway: StartGateway, raw: bytes, **keep: Any
) -> tuple[bytes, dict[str, Any]]:
    async def failing(request: web.Request) -> web.Response:
        return web.Response(status=400, body=raw, content_type="application/json")

    app = web.Application()
    app.router.add_get("/x", failing)
    upstream = await start_upstream(app)
    route = route_config(upstream, mode="envelope", **({"meta_original": keep} if keep else {}))
    gateway = await start_gateway(route)
    _, _, direct = await get(upstream + "/x")
    _, _, answer = await get(gateway.url + "/x")
    original: dict[str, Any] = json.loads(answer)["meta"]["original"]
    return direct, original


async def test_meta_original_keeps_all_by_default(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    direct, original = await envelope_with(start_upstream, start_gateway, json.dumps(LONG).encode())
    assert original == {"content_type": "application/json", "body": json.loads(direct)}


async def test_meta_original_truncated(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    raw = json.dumps(LONG).encode()
    direct, original = await envelope_with(
        start_upstream, start_gateway, raw, body="truncated", max_bytes=256
    )
    assert original == {
        "content_type": "application/json",
        "body": direct[:256].decode(),
        "truncated": True,
        "bytes": len(direct),
    }
    # A body within the bound is kept whole, parsed, and says nothing of truncation.
    small = b'{"message":"bad"}'
    _, original = await envelope_with(
        start_upstream, start_gateway, small, body="truncated", max_bytes=256
    )
    assert original == {"content_type": "application/json", "body": {"message": "bad"}}


async def test_meta_original_cut_is_whole_characters_and_redacted_first(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    accented = ("é" * 300).encode()  # two bytes each: 255 would split one
    _, original = await envelope_with(
        start_upstream, start_gateway, accented, body="truncated", max_bytes=255
    )
    assert original["body"] == "é" * 127 and original["bytes"] == 600
    # Cut first, the token's first 6 characters would stay (too short to look like one).
    leaky = ("x" * 242 + f" Bearer {BEARER} trailing").encode()
    _, original = await envelope_with(
        start_upstream, start_gateway, leaky, body="truncated", max_bytes=256
    )
    assert len(original["body"].encode()) == 256 and BEARER[:6] not in original["body"]
    assert original["body"].endswith("Bearer [REDAC")


async def test_meta_original_none(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    raw = json.dumps(LONG).encode()
    direct, original = await envelope_with(start_upstream, start_gateway, raw, body="none")
    assert original == {"content_type": "application/json", "body": None, "bytes": len(direct)}


REDACTOR = Redactor.build(RedactionSpec())
KEPT = {
    "drf csrf": "CSRF Failed: CSRF token missing.",
    "aws expired token": "The security token included in the request is expired",
    "basic scheme named": "Basic authentication required",
    "bearer scheme named": "Send a Bearer token in the Authorization header",
}
MASKED = {
    "bearer": (f"Authorization: Bearer {BEARER}", "Authorization: Bearer [REDACTED]"),
    "basic": ("Basic dXNlcjpwYXNz", "Basic [REDACTED]"),
    "token scheme": ("Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", "Token [REDACTED]"),
    "password pair": (f"password={PASSWORD}", "password=[REDACTED]"),
    "aws key": (f"key {AWS_KEY} used", "key [REDACTED] used"),
    "pem": (f"a {PEM} b", "a [REDACTED] b"),
}


@pytest.mark.parametrize("text", KEPT.values(), ids=KEPT.keys())
def test_words_after_a_scheme_name_are_not_credentials(text: str) -> None:
    assert REDACTOR.text(text) == text


@pytest.mark.parametrize(("text", "expected"), MASKED.values(), ids=MASKED.keys())
def test_credentials_are_masked(text: str, expected: str) -> None:
    assert REDACTOR.text(text) == expected


async def test_an_mcp_tool_errors_failure_item_is_redacted(tmp_path: Path) -> None:
    """The same step serves MCP: the failure item's message is clean, the tool's own text
    item (the server's words) is left as the server wrote it."""
    config = route_config("http://127.0.0.1:9", type="mcp", prefix="/mcp")
    loaded = load_config(str(write_config(tmp_path, config)))
    said = f"connect failed: password={PASSWORD} key {AWS_KEY}"
    sample = Sample(path="/mcp", is_mcp=True, tool="db.query", body=said.encode())
    explained = await explain(loaded, sample, Mode.ADDITIVE)
    content = json.loads(explained.answer.body)["result"]["content"]
    assert content[0]["text"] == said
    item = json.loads(content[-1]["text"])["mendpoint_failure"]
    assert PASSWORD not in json.dumps(item) and AWS_KEY not in json.dumps(item)
    assert "password=[REDACTED]" in item["error"]["message"]


STRIPE_KEY = "sk_live_51H8xyzABCdefGHIjklMNOpq1234"
NPM_TOKEN = "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
# The bodies that leaked before, as upstreams sent them: (status, content type, body, secret)
LEAKS: dict[str, tuple[int, str, Any, str]] = {
    "stripe": (
        401,
        "application/json",
        {"error": {"message": f"Invalid API key provided: {STRIPE_KEY}"}},
        STRIPE_KEY,
    ),
    "npm": (
        401,
        "text/plain",
        f"npm ERR! code E401\nnpm ERR! This token seems to be invalid: {NPM_TOKEN}",
        NPM_TOKEN[4:],
    ),
    "database url": (
        500,
        "text/plain",
        "could not connect to mysql://admin:DbPa55word@db.internal/shop",
        "DbPa55word",
    ),
    "json in a string": (
        500,
        "application/json",
        {"message": "upstream failed", "detail": json.dumps({"password": "hunter2pass"})},
        "hunter2pass",
    ),
    "multi-word": (
        500,
        "application/json",
        {"message": "login failed", "password": "correct horse battery staple"},
        "horse battery",
    ),
    "list": (
        500,
        "application/json",
        {"message": "forbidden", "headers": {"x-api-key": [STRIPE_KEY]}},
        STRIPE_KEY,
    ),
    "yaml": (
        500,
        "text/plain",
        "config error in:\ndb:\n  password:\n    hunter2pass\n",
        "hunter2pass",
    ),
}


async def test_what_leaked_before_reaches_no_copy(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """Each body through a real gateway: the envelope's message, fields and meta.original,
    and the unmatched-error signatures the admin listener's /gaps lists."""

    async def leak(request: web.Request) -> web.Response:
        status, content_type, body, _ = LEAKS[request.match_info["case"]]
        text = body if isinstance(body, str) else json.dumps(body)
        return web.Response(status=status, text=text, content_type=content_type)

    app = web.Application()
    app.router.add_get("/{case}", leak)
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream, mode="envelope"), admin="127.0.0.1:0")
    for case, (status, _, _, secret) in LEAKS.items():
        direct = await get(f"{upstream}/{case}")
        assert secret in direct[2].decode()  # the upstream leaks it
        answer_status, content_type, body = await get(f"{gateway.url}/{case}")
        assert (answer_status, content_type) == (status, "application/json")
        assert secret not in body.decode(), (case, body)
        assert "[REDACTED]" in copied(json.loads(body)), case
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{host}:{port}/gaps") as answer,
    ):
        gaps = await answer.text()
    texts = {entry["signature"] for entry in json.loads(gaps)["signatures"]}
    assert {  # default rules' work, each a gap; the messages keep what is not secret
        "Invalid API key provided: [REDACTED]",
        "could not connect to mysql://admin:[REDACTED]@db.internal/shop",
    } <= texts, texts
    for case, (_, _, _, secret) in LEAKS.items():
        assert secret not in gaps, (case, gaps)
