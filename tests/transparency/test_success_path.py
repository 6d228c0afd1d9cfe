"""Successful answers, direct and through the gateway with curl: equal but for INTENDED.

Includes what defeated the gateway before: a 17 KB Content-Security-Policy and 250 header
fields (real applications send both), which must pass rather than become a 502.
"""

from __future__ import annotations

import re

import pytest
from aiohttp import web

from tests.support.curl import curl
from tests.support.differential import INTENDED, assert_equivalent
from tests.support.gateway import StartGateway, StartUpstream, route_config
from tests.support.paths import REPO

CSP = "default-src 'self'; " + "; ".join(
    f"script-src-elem https://cdn{i}.example.com/assets/{i:04d}/" for i in range(300)
)


def app() -> web.Application:
    async def csp(request: web.Request) -> web.Response:
        return web.Response(
            text="<html></html>", content_type="text/html", headers={"Content-Security-Policy": CSP}
        )

    async def many(request: web.Request) -> web.Response:
        headers = {f"X-Feature-{i}": f"on-{i}" for i in range(250)}
        return web.Response(text="many", headers=headers)

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for i in range(5):
            await response.write(b'{"n": %d}\n' % i)
        await response.write_eof()
        return response

    async def untyped(request: web.Request) -> web.Response:
        response = web.Response(body=b"\x00\x01raw")
        response.headers.popall("Content-Type", None)
        return response

    async def cookies(request: web.Request) -> web.Response:
        response = web.Response(text="c", headers={"Cache-Control": "no-store", "ETag": '"v1"'})
        response.headers.add("Set-Cookie", "a=1; Path=/")
        response.headers.add("Set-Cookie", "b=2; Path=/; HttpOnly")
        return response

    application = web.Application()
    for path, handler in {
        "/csp": csp,
        "/many": many,
        "/streamed": streamed,
        "/untyped": untyped,
        "/cookies": cookies,
    }.items():
        application.router.add_get(path, handler)
    return application


@pytest.mark.parametrize("path", ["/csp", "/many", "/streamed", "/untyped", "/cookies"])
async def test_a_success_is_the_same_as_direct(
    path: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(app())
    gateway = await start_gateway(route_config(upstream))
    direct = await curl(upstream + path)
    proxied = await curl(gateway.url + path)
    assert direct.status == 200
    assert_equivalent(direct, proxied)


def test_every_intended_difference_is_documented() -> None:
    page = (REPO / "docs" / "transparency.md").read_text(encoding="utf-8").lower()
    for name in INTENDED:
        assert re.search(rf"`{re.escape(name)}", page), f"{name} is not in docs/transparency.md"
