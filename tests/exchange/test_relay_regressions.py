"""Regressions in relaying bodies that were found in CI, kept as tests."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from tests.support.gateway import StartGateway, StartUpstream, route_config


def bodiless_app() -> web.Application:
    async def no_content(request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def missing(request: web.Request) -> web.Response:
        return web.json_response({"message": "no"}, status=404)

    app = web.Application()
    app.router.add_get("/empty", no_content)
    app.router.add_route("HEAD", "/missing", missing)
    return app


@pytest.mark.parametrize(
    "method_path", [("GET", "/empty"), ("HEAD", "/missing")], ids=["204", "head-404"]
)
async def test_repeated_bodiless_responses_never_spin(
    start_gateway: StartGateway, start_upstream: StartUpstream, method_path: tuple[str, str]
) -> None:
    """aiohttp shares one empty payload whose chunk iterator ends only on first use; a relay
    built on `iter_chunks()` spun forever on the second bodiless response in a process."""
    method, path = method_path
    gateway = await start_gateway(route_config(await start_upstream(bodiless_app())))
    for _ in range(3):
        async with asyncio.timeout(5):
            response = await gateway.request(method, path)
            assert await response.read() == b""
            assert response.status in (204, 404)
