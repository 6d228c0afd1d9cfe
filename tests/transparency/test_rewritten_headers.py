"""A rewritten failure keeps the upstream's headers but for what the new body makes wrong.

Direct and through the gateway with httpx (docs/transparency.md, Rewritten bodies): a 416
keeps `Content-Range: bytes */1000`, its `ETag` and `Accept-Ranges`; validators and the coding
of the old bytes go. The table below says, for every header the gateway registers as tied to
the body, whether a rewrite keeps it and why, and each row is checked live.
"""

from __future__ import annotations

import gzip

import httpx
import pytest
from aiohttp import web

from gateway.exchange.rewritten_headers import BODY_HEADERS
from tests.support.gateway import StartGateway, StartUpstream, route_config

BODY = b'{"message":"Range Not Satisfiable"}'
RANGE_416 = {
    "Content-Range": "bytes */1000",
    "ETag": '"file-v7"',
    "Accept-Ranges": "bytes",
    "Last-Modified": "Tue, 01 Dec 2026 00:00:00 GMT",
    "Cache-Control": "no-cache",
}

# name → (kept on a 400, kept on a 416, why)
EXPECTED: dict[str, tuple[bool, bool, str]] = {
    "content-length": (False, False, "framing of the old bytes; the gateway writes its own"),
    "content-encoding": (False, False, "the rewritten body goes out decoded"),
    "etag": (False, True, "validates the old bytes; a 416's names the resource (If-Range)"),
    "content-md5": (False, False, "checksum of the old bytes"),
    "digest": (False, False, "checksum of the old bytes"),
    "content-digest": (False, False, "checksum of the old bytes"),
    "repr-digest": (False, False, "checksum of the old representation"),
    "content-range": (True, True, "a 416's gives the resource's length, not this body's range"),
    "accept-ranges": (True, True, "describes the resource, not this body"),
}
VALUES = {
    "content-encoding": "gzip",
    "content-range": "bytes */1000",
}


def app() -> web.Application:
    async def range_416(request: web.Request) -> web.Response:
        return web.json_response(status=416, body=BODY, headers=RANGE_416)

    async def one(request: web.Request) -> web.Response:
        name, status = request.match_info["name"], int(request.query["status"])
        body = gzip.compress(BODY) if name == "content-encoding" else BODY
        response = web.Response(status=status, body=body, content_type="application/json")
        if name != "content-length":  # aiohttp writes the true one
            response.headers[name] = VALUES.get(name, '"checksum-or-tag"')
        return response

    application = web.Application()
    application.router.add_get("/416", range_416)
    application.router.add_get("/one/{name}", one)
    return application


@pytest.mark.parametrize("mode", ["additive", "envelope"])
async def test_a_rewritten_416_keeps_the_resources_headers(
    mode: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(app())
    gateway = await start_gateway(route_config(upstream, mode=mode))
    async with httpx.AsyncClient() as client:
        direct = await client.get(upstream + "/416")
        proxied = await client.get(gateway.url + "/416")
    assert proxied.status_code == direct.status_code == 416
    assert proxied.content != direct.content  # rewritten
    assert proxied.headers["X-Error-Code"]
    for name in RANGE_416:
        assert proxied.headers.get_list(name) == direct.headers.get_list(name), name


def test_the_table_covers_every_registered_header() -> None:
    assert {h.name.lower() for h in BODY_HEADERS} == set(EXPECTED)
    assert all(h.why for h in BODY_HEADERS)
    content_range = next(h for h in BODY_HEADERS if h.name == "Content-Range")
    assert not content_range.keeps(206)  # a rewritten 206 would be framed as a part


@pytest.mark.parametrize("status", [400, 416])
@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_each_registered_header_is_kept_or_dropped_as_the_table_says(
    name: str, status: int, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(app())
    gateway = await start_gateway(route_config(upstream, mode="envelope"))
    url = f"/one/{name}?status={status}"
    async with httpx.AsyncClient() as client:
        direct = await client.get(upstream + url)
        proxied = await client.get(gateway.url + url)
    assert proxied.status_code == direct.status_code == status
    assert proxied.json()["meta"]["original"]["body"] == {"message": "Range Not Satisfiable"}
    kept = EXPECTED[name][0 if status == 400 else 1]
    if name == "content-length":  # always the new body's own
        assert proxied.headers[name] == str(len(proxied.content)) != direct.headers[name]
    elif kept:
        assert proxied.headers.get_list(name) == direct.headers.get_list(name)
    else:
        assert name not in proxied.headers and name in direct.headers
