"""The answer cache in a running gateway: a repeated failure is a hit with its own request id
and the same bytes otherwise, counted in `mendpoint_answer_cache_total`; a reload starts empty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from gateway.telemetry.metrics import REGISTRY
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream

BODY = {"error": {"message": "Widget 7 is out of stock", "type": "stock"}}


def shop() -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        # A fresh Date and request id on every answer: headers no rule reads.
        headers = {"X-Upstream-Id": request.headers.get("X-Count", "")}
        return web.json_response(BODY, status=409, headers=headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


def config(upstream: str, code: str) -> dict[str, Any]:
    return {
        "routes": [{"name": "shop", "prefix": "/", "upstream": upstream, "mode": "additive"}],
        "rules": [
            {
                "id": "stock",
                "match": {"status": [409], "json": {"path": "error.type", "equals": "stock"}},
                "error": {"code": code, "category": "CONFLICT"},
            }
        ],
    }


def rewrite(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def hits(result: str) -> float:
    return REGISTRY.get_sample_value("mendpoint_answer_cache_total", {"result": result}) or 0.0


async def fetch(gateway: RunningGateway, n: int) -> tuple[int, dict[str, Any], str]:
    headers = {"X-Count": str(n), "X-Request-Id": f'req-{n}"\\'}
    async with gateway.session.get(gateway.url + "/orders", headers=headers) as response:
        return response.status, json.loads(await response.read()), response.headers["X-Request-Id"]


async def test_a_repeated_failure_is_answered_from_the_cache_until_a_reload(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(shop())
    gateway = await start_gateway(config(upstream, "OUT_OF_STOCK"))
    before_hit, before_miss = hits("hit"), hits("miss")
    answers = [await fetch(gateway, n) for n in range(3)]
    assert hits("miss") == before_miss + 1 and hits("hit") == before_hit + 2
    for n, (status, body, request_id) in enumerate(answers):
        assert status == 409 and request_id == f'req-{n}"\\'
        assert body["error"]["request_id"] == request_id  # its own, escaped right
        assert body["error"]["code"] == "OUT_OF_STOCK"
        assert body["error"]["message"] == BODY["error"]["message"]
        body["error"].pop("request_id")
    assert answers[0][1] == answers[1][1] == answers[2][1]

    assert gateway.server.config_path is not None
    rewrite(Path(gateway.server.config_path), config(upstream, "SOLD_OUT"))
    assert await gateway.server.reload() is True
    misses = hits("miss")
    _, body, _ = await fetch(gateway, 9)
    assert body["error"]["code"] == "SOLD_OUT" and hits("miss") == misses + 1
