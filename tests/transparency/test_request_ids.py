"""`X-Request-Id` on responses: the upstream's own id survives, and both ids are logged.

Going direct, a client sees the id the upstream put on its answer and can find the request
in the upstream's logs with it; through the gateway it must see the same. When the upstream
sends none, the gateway's id is echoed (docs/transparency.md).
"""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from aiohttp import web

from gateway.telemetry.log_lines import JsonFormatter
from tests.support.gateway import StartGateway, StartUpstream, route_config


def app() -> web.Application:
    async def own_id(request: web.Request) -> web.Response:
        status = int(request.query.get("status", "200"))
        return web.json_response(
            {"detail": "x"}, status=status, headers={"X-Request-Id": "upstream-own-7"}
        )

    async def no_id(request: web.Request) -> web.Response:
        return web.Response(text="plain")

    application = web.Application()
    application.router.add_get("/own", own_id)
    application.router.add_get("/none", no_id)
    return application


@pytest.mark.parametrize("status", [200, 404, 500], ids=["success", "rewritten-404", "500"])
async def test_the_upstreams_own_request_id_is_kept_and_both_are_logged(
    status: int,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream = await start_upstream(app())
    gateway = await start_gateway(route_config(upstream, mode="additive"))
    sent = {"X-Request-Id": "client-id-1"}
    async with httpx.AsyncClient() as client:
        direct = await client.get(f"{upstream}/own?status={status}", headers=sent)
        caplog.set_level(logging.INFO, logger="mendpoint.access")
        proxied = await client.get(f"{gateway.url}/own?status={status}", headers=sent)
    assert proxied.status_code == direct.status_code == status
    assert proxied.headers.get_list("X-Request-Id") == direct.headers.get_list("X-Request-Id")
    assert direct.headers["X-Request-Id"] == "upstream-own-7"
    if status >= 400:  # the envelope still names the request as the caller sent it
        assert proxied.json()["error"]["request_id"] == "client-id-1"
    entry = json.loads(
        JsonFormatter().format(next(r for r in caplog.records if r.name == "mendpoint.access"))
    )
    assert (entry["request_id"], entry["upstream_request_id"]) == ("client-id-1", "upstream-own-7")


async def test_without_an_upstream_id_the_gateways_is_echoed(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    gateway = await start_gateway(route_config(await start_upstream(app())))
    async with httpx.AsyncClient() as client:
        given = await client.get(gateway.url + "/none", headers={"X-Request-Id": "abc-1"})
        made = await client.get(gateway.url + "/none")
    assert given.headers.get_list("X-Request-Id") == ["abc-1"]
    assert len(made.headers["X-Request-Id"]) == 32
