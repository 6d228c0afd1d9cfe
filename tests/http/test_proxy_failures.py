"""Upstream 4xx/5xx responses: delivery modes, additive merging, framing and body limits.

A real aiohttp upstream answers canned failures; a real gateway in front of it renders them
for the mode chosen by the route, by `X-Error-Format`, or not at all (`client_override: false`).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDictProxy

from tests.support.gateway import RunningGateway, StartGateway, StartUpstream, route_config

MODES = ("original", "headers", "additive", "envelope")
REQUEST_ID = "rid-failures-1"
ERROR_FIELDS = {
    "code",
    "message",
    "retryable",
    "retry_after_ms",
    "fix_required",
    "fix_command",
    "suggestion",
    "request_id",
    "recoverable",
    "recovery_available",
}
ENVELOPE_KEYS = {"ok", "data", "error", "failure", "recovery", "warnings", "meta"}
ADDED_BY_ADDITIVE = {"error", "failure", "recovery", "recoverable", "recovery_available"}
ADVISORY = ("X-Error-Code", "X-Error-Retryable", "X-Error-Recoverable", "X-Recovery-Available")
NO_OPTIONS = {"available": False, "options": []}
CAP = 1024


@dataclass(frozen=True)
class Canned:
    """A failure the upstream sends verbatim (Content-Length framing)."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def _sized(size: int) -> bytes:
    """A JSON object of exactly `size` bytes."""
    base = b'{"message":"sized","pad":""}'
    body = base[:-2] + b"p" * (size - len(base)) + b'"}'
    assert len(body) == size
    return body


NOT_FOUND = {"message": "no such widget", "extra": 1, "nested": {"a": [1, 2]}}
GZIPPED_JSON = {"message": "bad zipped field", "field": "name"}
HTML = b"<html><body><h1>Service Unavailable</h1><p>try later</p></body></html>"

CANNED: dict[str, Canned] = {
    "not-found": Canned(
        404,
        json.dumps(NOT_FOUND).encode(),
        headers={"ETag": '"e1"', "X-Upstream": "kept", "Cache-Control": "no-store"},
    ),
    "problem": Canned(
        422,
        b'{"type":"https://x.example/validation","title":"Unprocessable","status":422,'
        b'"detail":"name is required"}',
        "application/problem+json",
    ),
    "error-object": Canned(
        400, b'{"error":{"code":"UPSTREAM_OWN","message":"bad field","retryable":true},"x":1}'
    ),
    "error-string": Canned(
        401, b'{"error":"invalid_token","error_description":"The access token expired"}'
    ),
    "error-null": Canned(400, b'{"error":null,"x":1}'),
    "error-list": Canned(400, b'{"error":["first","second"]}'),
    "colliding-keys": Canned(
        400, b'{"message":"m","failure":"upstream own","recovery":5,"recoverable":"maybe"}'
    ),
    "html": Canned(503, HTML, "text/html; charset=utf-8"),
    "text": Canned(500, b"internal boom\n", "text/plain"),
    "array": Canned(400, b'[{"msg":"bad"}]'),
    "empty": Canned(500, b""),
    "invalid-json": Canned(400, b'{"unterminated": '),
    "json-string": Canned(400, b'"just a string"'),
    "retry-after": Canned(503, b'{"message":"busy"}', headers={"Retry-After": "120"}),
    "no-retry-after": Canned(503, b'{"message":"busy"}'),
    "retry-json": Canned(429, b'{"message":"slow down","retry_after":2.5}'),
    "bad-gateway": Canned(502, b'{"message":"upstream of upstream"}'),
    "at-cap": Canned(500, _sized(CAP)),
    "over-cap": Canned(500, _sized(CAP + 1)),
    "big": Canned(500, _sized(5 * CAP)),
    "gzip-json": Canned(
        400,
        gzip.compress(json.dumps(GZIPPED_JSON).encode()),
        headers={"Content-Encoding": "gzip", "ETag": '"gz"'},
    ),
    "gzip-html": Canned(
        400, gzip.compress(HTML), "text/html", headers={"Content-Encoding": "gzip"}
    ),
    "gzip-over-cap": Canned(
        400,
        gzip.compress(b'{"message":"bomb","pad":"' + b" " * (2 << 20) + b'"}'),
        headers={"Content-Encoding": "gzip"},
    ),
    "brotli-unknown": Canned(400, b"\x1b\x0f\x00\xf8\xff\x05", headers={"Content-Encoding": "br"}),
}
NON_OBJECTS = ("html", "text", "array", "empty", "invalid-json", "json-string")


@dataclass
class Upstream:
    hits: int = 0
    sse_release: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/canned/{name}", self.canned)
        app.router.add_get("/streamed/{name}", self.streamed)
        app.router.add_get("/trickle", self.trickle)
        app.router.add_get("/sse", self.sse)
        return app

    async def canned(self, request: web.Request) -> web.Response:
        self.hits += 1
        spec = CANNED[request.match_info["name"]]
        headers = {"Content-Type": spec.content_type, **spec.headers}
        return web.Response(status=spec.status, body=spec.body, headers=headers)

    async def streamed(self, request: web.Request) -> web.StreamResponse:
        """The canned body, chunked (no Content-Length), in 100-byte writes."""
        self.hits += 1
        spec = CANNED[request.match_info["name"]]
        response = web.StreamResponse(
            status=spec.status, headers={"Content-Type": spec.content_type}
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(spec.body), 100):
            await response.write(spec.body[start : start + 100])
        await response.write_eof()
        return response

    async def trickle(self, request: web.Request) -> web.StreamResponse:
        """A JSON error body written 7 bytes at a time, yielding to the loop between writes."""
        self.hits += 1
        body = TRICKLED
        response = web.StreamResponse(status=400, headers={"Content-Type": "application/json"})
        if request.query.get("framing") == "length":
            response.content_length = len(body)
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 7):
            await response.write(body[start : start + 7])
            await asyncio.sleep(0.0005 if start % 140 == 0 else 0)
        await response.write_eof()
        return response

    async def sse(self, request: web.Request) -> web.StreamResponse:
        """A 429 event stream whose second event waits until the client has seen the first."""
        self.hits += 1
        response = web.StreamResponse(status=429, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"id: 1\ndata: first\n\n")
        await asyncio.wait_for(self.sse_release.wait(), 10)
        await response.write(b"id: 2\ndata: second\n\n")
        await response.write_eof()
        return response


TRICKLED = json.dumps({"message": "slowly", "pad": "t" * 2000, "tail": [1, 2, 3]}).encode()


@dataclass(frozen=True)
class Reply:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def fetch(
    gateway: RunningGateway,
    path: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
) -> Reply:
    sent = {"X-Request-Id": REQUEST_ID, **(headers or {})}
    url = gateway.url + path
    async with gateway.session.request(method, url, headers=sent) as response:
        return Reply(response.status, response.headers, await response.read())


@pytest.fixture
async def upstream(start_upstream: StartUpstream) -> AsyncIterator[tuple[Upstream, str]]:
    recorder = Upstream()
    url = await start_upstream(recorder.app())
    yield recorder, url
    recorder.sse_release.set()


def assert_advisory(reply: Reply, code: str, retryable: bool = False) -> None:
    assert reply.headers["X-Error-Code"] == code
    assert reply.headers["X-Error-Retryable"] == ("true" if retryable else "false")
    assert reply.headers["X-Error-Recoverable"] in ("true", "false")
    assert reply.headers["X-Recovery-Available"] == "false"


def assert_no_advisory(reply: Reply) -> None:
    for name in ADVISORY:
        assert name not in reply.headers


def assert_length_matches(reply: Reply) -> None:
    assert "Transfer-Encoding" not in reply.headers
    assert int(reply.headers["Content-Length"]) == len(reply.body)


# --- the four modes, and how one is chosen ------------------------------------------------


def check_not_found(mode: str, reply: Reply) -> None:
    """The 404 JSON failure as each mode must deliver it."""
    original = CANNED["not-found"]
    assert reply.status == 404
    assert reply.headers["X-Request-Id"] == REQUEST_ID
    assert reply.headers["X-Upstream"] == "kept"
    assert reply.headers["Cache-Control"] == "no-store"
    if mode in ("original", "headers"):
        assert reply.body == original.body
        assert reply.headers["Content-Type"] == "application/json"
        assert reply.headers["Content-Length"] == str(len(original.body))
        assert reply.headers["ETag"] == '"e1"'
        if mode == "original":
            assert_no_advisory(reply)
        else:
            assert_advisory(reply, "NOT_FOUND")
        return
    assert_advisory(reply, "NOT_FOUND")
    assert_length_matches(reply)
    assert "ETag" not in reply.headers
    assert reply.headers["Content-Type"] == "application/json"
    body = reply.json()
    assert set(body["error"]) == ERROR_FIELDS
    assert body["error"]["code"] == "NOT_FOUND"
    assert body["error"]["message"] == "no such widget"
    assert body["error"]["retryable"] is False
    assert body["error"]["request_id"] == REQUEST_ID
    assert body["error"]["recovery_available"] is False
    assert body["failure"]["category"] == "NOT_FOUND"
    assert body["failure"]["code"] == "NOT_FOUND"
    assert body["recovery"] == NO_OPTIONS
    if mode == "additive":
        assert set(body) == set(NOT_FOUND) | ADDED_BY_ADDITIVE
        assert {k: body[k] for k in NOT_FOUND} == NOT_FOUND
        assert body["recoverable"] is False
        assert body["recovery_available"] is False
        return
    assert set(body) == ENVELOPE_KEYS
    assert body["ok"] is False
    assert body["data"] is None
    assert body["warnings"] == []
    assert body["failure"]["recoverable"] is False
    assert body["failure"]["retryable"] is False
    meta = body["meta"]
    assert meta["upstream_status"] == 404
    assert meta["rule"] == "http-404"
    assert meta["exit_code"] == 3
    assert isinstance(meta["duration_ms"], int)
    assert meta["original"] == {"content_type": "application/json", "body": NOT_FOUND}


def _other(mode: str) -> str:
    return "envelope" if mode != "envelope" else "original"


# (route mode, X-Error-Format sent, client_override, the mode that must be delivered)
SELECTIONS: dict[str, tuple[str, str | None, bool, str]] = {
    **{f"route-{m}": (m, None, True, m) for m in MODES},
    **{f"header-{m}": ("original" if m != "original" else "additive", m, True, m) for m in MODES},
    **{f"locked-{m}": (m, _other(m), False, m) for m in MODES},
    "header-mixed-case": ("original", "  EnVeLoPe ", True, "envelope"),
    "header-unknown-ignored": ("headers", "xml", True, "headers"),
}


@pytest.mark.parametrize(
    ("route_mode", "asked", "override", "delivered"),
    list(SELECTIONS.values()),
    ids=list(SELECTIONS),
)
async def test_mode_selection_and_rendering(
    route_mode: str,
    asked: str | None,
    override: bool,
    delivered: str,
    upstream: tuple[Upstream, str],
    start_gateway: StartGateway,
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base, mode=route_mode, client_override=override))
    headers = {} if asked is None else {"X-Error-Format": asked}
    reply = await fetch(gateway, "/canned/not-found", headers=headers)
    check_not_found(delivered, reply)
    assert recorder.hits == 1


async def test_head_failure_gets_headers_only(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base, mode="envelope"))
    reply = await fetch(gateway, "/canned/not-found", method="HEAD")
    assert reply.status == 404
    assert reply.body == b""
    assert_advisory(reply, "NOT_FOUND")
    assert reply.headers["Content-Length"] == str(len(CANNED["not-found"].body))


# --- additive: every upstream field kept, error fields only where absent -------------------


async def _additive(start_gateway: StartGateway, base: str, name: str) -> tuple[Reply, Any]:
    gateway = await start_gateway(route_config(base, mode="additive"))
    reply = await fetch(gateway, f"/canned/{name}")
    assert reply.status == CANNED[name].status
    assert_length_matches(reply)
    return reply, reply.json()


def _upstream_json(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(CANNED[name].body)
    return value


async def test_additive_fills_an_error_object_only_where_absent(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    _, body = await _additive(start_gateway, base, "error-object")
    assert body["x"] == 1
    error = body["error"]
    assert set(error) == ERROR_FIELDS
    assert error["code"] == "UPSTREAM_OWN"
    assert error["message"] == "bad field"
    assert error["retryable"] is True
    assert error["fix_required"] == "Correct the request as the message describes, then reissue it"
    assert error["request_id"] == REQUEST_ID
    assert error["recoverable"] is True
    assert body["failure"]["code"] == "BAD_REQUEST"
    assert body["failure"]["retryable"] is False
    assert body["recoverable"] is True


@pytest.mark.parametrize("name", ["error-string", "error-list", "error-null"])
async def test_additive_leaves_a_non_object_error_alone(
    name: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    reply, body = await _additive(start_gateway, base, name)
    original = _upstream_json(name)
    assert {k: body[k] for k in original} == original
    assert set(body) == set(original) | ADDED_BY_ADDITIVE - {"error"}
    failure = body["failure"]
    assert failure["request_id"] == REQUEST_ID
    assert failure["code"] == reply.headers["X-Error-Code"]
    assert {"category", "retryable", "recoverable", "fix_required"} <= set(failure)


async def test_additive_on_problem_json_keeps_its_content_type(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    reply, body = await _additive(start_gateway, base, "problem")
    assert reply.headers["Content-Type"] == "application/problem+json"
    original = _upstream_json("problem")
    assert {k: body[k] for k in original} == original
    assert body["error"]["code"] == "VALIDATION_FAILED"
    assert body["error"]["message"] == "name is required"
    assert body["failure"]["recovery_intent"] == {"intent": "input_validation"}
    assert_advisory(reply, "VALIDATION_FAILED")
    assert reply.headers["X-Error-Recoverable"] == "true"


async def test_additive_never_overwrites_upstream_top_level_keys(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    _, body = await _additive(start_gateway, base, "colliding-keys")
    assert body["failure"] == "upstream own"
    assert body["recovery"] == 5
    assert body["recoverable"] == "maybe"
    assert body["message"] == "m"
    assert body["error"]["code"] == "BAD_REQUEST"
    assert body["recovery_available"] is False


@pytest.mark.parametrize("name", NON_OBJECTS)
async def test_additive_leaves_non_object_bodies_byte_for_byte(
    name: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    spec = CANNED[name]
    gateway = await start_gateway(route_config(base, mode="additive"))
    reply = await fetch(gateway, f"/canned/{name}")
    assert reply.status == spec.status
    assert reply.body == spec.body
    assert reply.headers["Content-Type"] == spec.content_type
    assert reply.headers["Content-Length"] == str(len(spec.body))
    assert "X-Error-Code" in reply.headers


async def test_envelope_carries_html_as_text_and_never_as_message(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base, mode="envelope"))
    reply = await fetch(gateway, "/canned/html")
    assert reply.status == 503
    assert reply.headers["Content-Type"] == "application/json"
    assert_length_matches(reply)
    body = reply.json()
    assert body["meta"]["original"] == {
        "content_type": "text/html; charset=utf-8",
        "body": HTML.decode(),
    }
    assert "<" not in body["error"]["message"]
    assert body["error"]["code"] == "SERVICE_UNAVAILABLE"


# --- Retry-After ----------------------------------------------------------------------------

RETRY_AFTER: dict[str, tuple[str, str, list[str], int | None]] = {
    "503-default-added": ("GET", "no-retry-after", ["1"], 1000),
    "503-upstream-kept": ("GET", "retry-after", ["120"], 120_000),
    "429-json-seconds-rounded-up": ("GET", "retry-json", ["3"], 2500),
    "502-get-retryable": ("GET", "bad-gateway", ["1"], 1000),
    "502-post-not-retryable": ("POST", "bad-gateway", [], None),
    "404-not-retryable": ("GET", "not-found", [], None),
}


@pytest.mark.parametrize(
    ("method", "name", "header", "retry_after_ms"),
    list(RETRY_AFTER.values()),
    ids=list(RETRY_AFTER),
)
async def test_retry_after_is_added_only_when_retryable_and_absent(
    method: str,
    name: str,
    header: list[str],
    retry_after_ms: int | None,
    upstream: tuple[Upstream, str],
    start_gateway: StartGateway,
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base, mode="additive"))
    reply = await fetch(gateway, f"/canned/{name}", method=method)
    assert reply.headers.getall("Retry-After", []) == header
    assert reply.headers["X-Error-Retryable"] == ("true" if header else "false")
    body = reply.json()
    assert body["error"]["retry_after_ms"] == retry_after_ms
    assert body["error"]["retryable"] is bool(header)


# --- the error-body cap, and bodies that arrive in pieces ----------------------------------


@pytest.mark.parametrize("mode", ["additive", "envelope"])
@pytest.mark.parametrize(
    ("prefix", "name"),
    [
        ("/canned/", "over-cap"),
        ("/canned/", "big"),
        ("/streamed/", "over-cap"),
        ("/streamed/", "big"),
    ],
    ids=["length-cap+1", "length-5x", "chunked-cap+1", "chunked-5x"],
)
async def test_body_over_the_cap_passes_whole_with_headers_only(
    mode: str,
    prefix: str,
    name: str,
    upstream: tuple[Upstream, str],
    start_gateway: StartGateway,
) -> None:
    _, base = upstream
    config = {**route_config(base, mode=mode), "limits": {"error_body_bytes": CAP}}
    gateway = await start_gateway(config)
    reply = await fetch(gateway, prefix + name)
    assert reply.status == 500
    assert reply.body == CANNED[name].body
    assert reply.headers["Content-Type"] == "application/json"
    assert_advisory(reply, "UPSTREAM_INTERNAL_ERROR")


@pytest.mark.parametrize("prefix", ["/canned/", "/streamed/"], ids=["length", "chunked"])
async def test_body_exactly_at_the_cap_is_rewritten(
    prefix: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    config = {**route_config(base, mode="additive"), "limits": {"error_body_bytes": CAP}}
    gateway = await start_gateway(config)
    reply = await fetch(gateway, prefix + "at-cap")
    assert_length_matches(reply)
    body = reply.json()
    assert body["pad"] == _upstream_json("at-cap")["pad"]
    assert body["error"]["code"] == "UPSTREAM_INTERNAL_ERROR"


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_trickled_error_body_is_read_whole(
    framing: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base, mode="additive"))
    reply = await fetch(gateway, f"/trickle?framing={framing}")
    assert reply.status == 400
    assert_length_matches(reply)
    body = reply.json()
    assert {k: body[k] for k in ("message", "pad", "tail")} == json.loads(TRICKLED)
    assert body["error"]["message"] == "slowly"


# --- encoded error bodies -------------------------------------------------------------------


async def test_gzip_json_error_is_rendered_decoded_in_additive(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base, mode="additive"))
    reply = await fetch(gateway, "/canned/gzip-json", headers={"Accept-Encoding": "gzip"})
    assert reply.status == 400
    assert "Content-Encoding" not in reply.headers
    assert "ETag" not in reply.headers
    assert_length_matches(reply)
    body = reply.json()
    assert {k: body[k] for k in GZIPPED_JSON} == GZIPPED_JSON
    assert body["error"]["message"] == "bad zipped field"


async def test_gzip_json_error_is_carried_decoded_in_envelope(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base, mode="envelope"))
    reply = await fetch(gateway, "/canned/gzip-json", headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in reply.headers
    assert_length_matches(reply)
    assert reply.json()["meta"]["original"]["body"] == GZIPPED_JSON


@pytest.mark.parametrize(
    ("mode", "name"),
    [
        ("headers", "gzip-json"),
        ("original", "gzip-json"),
        ("additive", "gzip-html"),
        ("additive", "brotli-unknown"),
        ("additive", "gzip-over-cap"),
        ("envelope", "gzip-over-cap"),
        ("envelope", "brotli-unknown"),
    ],
    ids=[
        "headers-gzip-json",
        "original-gzip-json",
        "additive-gzip-html",
        "additive-br",
        "additive-gzip-inflates-past-cap",
        "envelope-gzip-inflates-past-cap",
        "envelope-br",
    ],
)
async def test_encoded_error_passes_unchanged_when_not_rewritten(
    mode: str, name: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    spec = CANNED[name]
    gateway = await start_gateway(route_config(base, mode=mode))
    reply = await fetch(gateway, f"/canned/{name}", headers={"Accept-Encoding": "gzip, br"})
    assert reply.status == 400
    assert reply.body == spec.body
    assert reply.headers["Content-Encoding"] == spec.headers["Content-Encoding"]
    assert reply.headers["Content-Length"] == str(len(spec.body))
    if mode == "original":
        assert_no_advisory(reply)
    else:
        assert reply.headers["X-Error-Code"]


# --- streams are not buffered ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["headers", "additive", "envelope"])
async def test_event_stream_error_is_relayed_without_buffering(
    mode: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base, mode=mode))
    headers = {"X-Request-Id": REQUEST_ID}
    async with gateway.session.get(gateway.url + "/sse", headers=headers) as response:
        assert response.status == 429
        assert response.headers["Content-Type"] == "text/event-stream"
        assert response.headers["X-Error-Code"] == "RATE_LIMITED"
        # The upstream holds the second event until the first has reached the client: a
        # gateway that buffered the error body would never deliver it (and time out here).
        async with asyncio.timeout(5):
            first = await response.content.readuntil(b"\n\n")
        assert first == b"id: 1\ndata: first\n\n"
        recorder.sse_release.set()
        assert await response.read() == b"id: 2\ndata: second\n\n"


# --- no rule: nothing is touched ------------------------------------------------------------


async def test_unclassified_failure_passes_untouched_when_defaults_are_off(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway({**route_config(base, mode="envelope"), "defaults": False})
    reply = await fetch(gateway, "/canned/not-found")
    assert reply.status == 404
    assert reply.body == CANNED["not-found"].body
    assert_no_advisory(reply)
    assert reply.headers["ETag"] == '"e1"'
