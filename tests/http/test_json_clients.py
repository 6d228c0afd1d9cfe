"""JSON for clients that asked for JSON (docs/configuration.md, `routes[].json_for_json_clients`).

In `additive` mode an HTML or text error page answers a client whose `Accept` prefers JSON
with the envelope (status and the upstream's other headers unchanged); a browser, curl's
`*/*` and a client that ranks HTML first get the upstream's bytes. Each request goes to the
real Flask app (Werkzeug's HTML error pages) directly and through the gateway, sent by real
clients (httpx, curl, aiohttp) with the `Accept` headers they send in the field.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import dataclass

import httpx
import pytest
from aiohttp import web
from multidict import CIMultiDict

from gateway.failure import Mode
from gateway.offline.explain import Sample, explain
from tests.support.frameworks import FrameworkApp
from tests.support.gateway import (
    RunningGateway,
    StartGateway,
    StartUpstream,
    parse_response,
    route_config,
)

FIREFOX = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
CHROME = (
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
    "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
)
AXIOS = "application/json, text/plain, */*"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: CIMultiDict[str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")

    def vary(self) -> set[str]:
        return {v.strip().lower() for h in self.headers.getall("Vary", []) for v in h.split(",")}


async def with_httpx(url: str, accept: str | None) -> Answer:
    headers = {"Accept": accept} if accept is not None else {}
    async with httpx.AsyncClient() as client:
        answer = await client.get(url, headers=headers)
    multi: CIMultiDict[str] = CIMultiDict(answer.headers.multi_items())
    return Answer(answer.status_code, multi, answer.content)


async def with_curl(url: str, accept: str | None) -> Answer:
    """curl as people type it; without `accept` it sends its own `Accept: */*`."""
    command = ["curl", "-s", "-i", "--max-time", "10", url]
    if accept is not None:
        command += ["-H", f"Accept: {accept}"]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, check=True)
    parsed = parse_response(done.stdout)
    return Answer(parsed.status, parsed.headers, parsed.body)


CLIENTS = {"httpx": with_httpx, "curl": with_curl}


async def both(
    app_url: str, gateway: RunningGateway, path: str, accept: str | None, client: str
) -> tuple[Answer, Answer]:
    send = CLIENTS[client]
    return await send(app_url + path, accept), await send(gateway.url + path, accept)


def assert_envelope_for(direct: Answer, through: Answer, code: str) -> dict[str, object]:
    """The gateway answered the envelope: same status, the upstream's page in meta.original."""
    assert through.status == direct.status
    assert through.content_type == "application/json"
    envelope = json.loads(through.body)
    assert envelope["ok"] is False and envelope["error"]["code"] == code
    assert through.headers["X-Error-Code"] == code
    original = envelope["meta"]["original"]
    assert original == {"content_type": direct.content_type, "body": direct.body.decode()}
    assert "<" not in envelope["error"]["message"]  # never raw HTML
    assert "accept" in through.vary()
    assert int(through.headers["Content-Length"]) == len(through.body)
    return dict(envelope)


def assert_original_bytes(direct: Answer, through: Answer) -> None:
    assert (through.status, through.body) == (direct.status, direct.body)
    assert through.content_type == direct.content_type
    assert "X-Error-Code" in through.headers  # still classified: the advisory headers
    assert "accept" in through.vary()  # a cache must not give this page to a JSON client


JSON_CLIENTS = {
    "an SDK": "application/json",
    "axios": AXIOS,
    "problem+json": "application/problem+json",
    "json above html": "text/html;q=0.5, application/json",
}
OTHER_CLIENTS = {
    "firefox": FIREFOX,
    "chrome": CHROME,
    "the client's default": None,
    "html above json": "application/json;q=0.5, text/html",
    "json and html tied": "application/json, text/html",
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("accept", JSON_CLIENTS.values(), ids=JSON_CLIENTS.keys())
async def test_a_json_client_gets_the_envelope_for_an_html_page(
    flask_app: FrameworkApp, start_gateway: StartGateway, accept: str, client: str
) -> None:
    gateway = await start_gateway(route_config(flask_app.url))
    direct, through = await both(flask_app.url, gateway, "/search", accept, client)
    assert direct.status == 429 and direct.content_type.startswith("text/html")
    envelope = assert_envelope_for(direct, through, "RATE_LIMITED")
    assert envelope["error"]["message"] == "Too Many Requests: Slow down: 5 searches per minute"  # type: ignore[index]
    assert through.headers["Retry-After"] == direct.headers["Retry-After"] == "7"


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("accept", OTHER_CLIENTS.values(), ids=OTHER_CLIENTS.keys())
async def test_browsers_and_undecided_clients_get_the_page(
    flask_app: FrameworkApp, start_gateway: StartGateway, accept: str | None, client: str
) -> None:
    gateway = await start_gateway(route_config(flask_app.url))
    for path in ("/search", "/admin", "/crash"):
        direct, through = await both(flask_app.url, gateway, path, accept, client)
        assert direct.content_type.startswith("text/html")
        assert_original_bytes(direct, through)


async def test_the_route_option_turns_it_off(
    flask_app: FrameworkApp, start_gateway: StartGateway
) -> None:
    gateway = await start_gateway(route_config(flask_app.url, json_for_json_clients=False))
    direct, through = await both(flask_app.url, gateway, "/admin", "application/json", "httpx")
    assert (through.status, through.body) == (direct.status, direct.body) == (403, direct.body)
    assert through.headers["X-Error-Code"] == "FORBIDDEN"
    assert "accept" not in through.vary()


async def test_only_additive_mode_changes(
    flask_app: FrameworkApp, start_gateway: StartGateway
) -> None:
    """`headers` (shadow) and `original` never touch the body, whatever the client asks."""
    for mode in ("headers", "original"):
        gateway = await start_gateway(route_config(flask_app.url, mode=mode))
        direct, through = await both(flask_app.url, gateway, "/crash", "application/json", "curl")
        assert (through.status, through.body) == (direct.status, direct.body) == (500, direct.body)


async def test_text_and_json_errors(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """A plain-text error is enveloped for a JSON client; a JSON error keeps additive's merge
    (its members intact), and a JSON array passes as it came."""

    async def overloaded(request: web.Request) -> web.Response:
        return web.Response(status=503, text="upstream overloaded, try later\n")

    async def problem(request: web.Request) -> web.Response:
        body = {"title": "Out of stock", "detail": "item 7 is gone"}
        return web.json_response(body, status=409, content_type="application/problem+json")

    async def array(request: web.Request) -> web.Response:
        return web.json_response(["not", "an", "object"], status=400)

    app = web.Application()
    app.router.add_get("/text", overloaded)
    app.router.add_get("/problem", problem)
    app.router.add_get("/array", array)
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream))

    direct, through = await both(upstream, gateway, "/text", "application/json", "httpx")
    envelope = assert_envelope_for(direct, through, "SERVICE_UNAVAILABLE")
    assert envelope["error"]["retryable"] is True  # type: ignore[index]

    direct, through = await both(upstream, gateway, "/problem", "application/json", "httpx")
    assert through.status == 409 and through.content_type == direct.content_type
    merged = json.loads(through.body)
    assert {k: merged[k] for k in ("title", "detail")} == json.loads(direct.body)
    assert "meta" not in merged and merged["error"]["code"] == "CONFLICT"
    assert "accept" not in through.vary()  # the answer does not depend on Accept

    direct, through = await both(upstream, gateway, "/array", "application/json", "httpx")
    assert (through.status, through.body) == (direct.status, direct.body)


S3_404 = (
    '<?xml version="1.0" encoding="utf-8"?>\n<Error><Code>NoSuchKey</Code>'
    "<Message>The specified key does not exist.</Message><Key>missing.txt</Key></Error>"
)


async def test_xml_and_untyped_text_errors(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """An XML error document (S3's, as application/xml and as text/xml) and a text body sent
    as application/octet-stream (nginx's default type for its `return 503 "…"`) are enveloped
    for a JSON client with their words in error.message; a binary body is not, and an SDK
    that asks for XML keeps the document (docs/configuration.md#json-for-json-clients)."""

    async def s3(request: web.Request) -> web.Response:
        return web.Response(status=404, body=S3_404.encode(), content_type="application/xml")

    async def s3_text_xml(request: web.Request) -> web.Response:
        return web.Response(status=404, body=S3_404.encode(), content_type="text/xml")

    async def maintenance(request: web.Request) -> web.Response:
        body = b"Down for maintenance until 06:00 UTC\n"
        return web.Response(status=503, body=body, content_type="application/octet-stream")

    async def binary(request: web.Request) -> web.Response:
        body = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x01"
        return web.Response(status=500, body=body, content_type="application/octet-stream")

    app = web.Application()
    app.router.add_get("/s3", s3)
    app.router.add_get("/s3-text-xml", s3_text_xml)
    app.router.add_get("/maintenance", maintenance)
    app.router.add_get("/binary", binary)
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream))

    for path in ("/s3", "/s3-text-xml"):
        for client in sorted(CLIENTS):
            direct, through = await both(upstream, gateway, path, "application/json", client)
            envelope = assert_envelope_for(direct, through, "NOT_FOUND")
            assert envelope["error"]["message"] == "The specified key does not exist."  # type: ignore[index]
        direct, through = await both(upstream, gateway, path, "application/xml", "httpx")
        assert_original_bytes(direct, through)

    direct, through = await both(upstream, gateway, "/maintenance", "application/json", "curl")
    envelope = assert_envelope_for(direct, through, "SERVICE_UNAVAILABLE")
    assert envelope["error"]["message"] == "Down for maintenance until 06:00 UTC"  # type: ignore[index]

    direct, through = await both(upstream, gateway, "/binary", "application/json", "httpx")
    assert (through.status, through.body) == (direct.status, direct.body)
    assert through.content_type == direct.content_type


@pytest.mark.parametrize("accept", ["application/json", FIREFOX], ids=["json", "browser"])
async def test_explain_answers_as_the_gateway_does(
    flask_app: FrameworkApp, start_gateway: StartGateway, accept: str
) -> None:
    """`mendpoint explain --request-header Accept:…` shows the answer the live gateway sends."""
    config = route_config(flask_app.url)
    gateway = await start_gateway(config)
    direct, through = await both(flask_app.url, gateway, "/admin", accept, "httpx")
    sample = Sample(
        path="/admin",
        status=direct.status,
        headers=direct.headers,
        body=direct.body,
        request_headers=CIMultiDict({"Accept": accept}),
        request_id=through.headers["X-Request-Id"],
    )
    explained = await explain(gateway.server.loaded, sample, Mode.ADDITIVE)
    assert explained.answer.status == through.status
    assert explained.answer.headers["Content-Type"] == through.content_type
    assert explained.answer.headers.getall("Vary") == through.headers.getall("Vary")
    if accept == FIREFOX:
        assert explained.answer.body == through.body
    else:
        live, offline = json.loads(through.body), json.loads(explained.answer.body)
        for envelope in (live, offline):
            envelope["meta"].pop("duration_ms")
        assert offline == live
