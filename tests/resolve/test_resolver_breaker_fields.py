"""A request the gateway cannot send is not the resolver's failure (docs/recovery.md).

Through a real gateway process and a real `mendpoint resolver` process: failures on paths of
thousands of characters (the default operation name is `METHOD /path`, over the wire's 256)
still get their options, with the name cut to fit, and count nothing against the breaker; a
normal request after them is resolved as before. On main each long path was a validation
error counted as a resolver failure: three of them kept recovery off for every caller for the
whole cool-down.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.support.gateway import (
    StartUpstream,
    start_process,
    stop_process,
    supervised,
    write_config,
)
from tests.support.ports import free_port

SKILL = {
    "name": "schema.explain_input",
    "version": "1.0.0",
    "recovers": ["input_explanation"],
    "repair": "inspect",
    "purpose": "Explain which input was wrong.",
}
RULE = {
    "id": "bad-input",
    "match": {"status": [422]},
    "error": {
        "code": "BAD_INPUT",
        "category": "VALIDATION_ERROR",
        "fix_required": "Send valid input, then reissue",
        "recovery_intent": "input_explanation",
    },
}


def unprocessable() -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"message": "invalid input"}, status=422)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


async def resolver_ready(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.post(url, data=b"{}") as response:
                    if response.status in (400, 422):
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("the resolver never answered")


async def available(session: aiohttp.ClientSession, url: str) -> bool:
    async with session.get(url, headers={"X-Error-Format": "envelope"}) as response:
        assert response.status == 422
        body: dict[str, Any] = json.loads(await response.read())
    return bool(body["recovery"]["available"])


async def test_long_paths_leave_the_breaker_closed(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(unprocessable())
    catalog = write_config(tmp_path, {"skills": [SKILL]}, "catalog.yaml")
    resolver_listen = f"127.0.0.1:{free_port()}"
    resolver = await start_process(
        "resolver", "--config", str(catalog), "--listen", resolver_listen
    )
    try:
        resolve_url = f"http://{resolver_listen}/v1/resolve"
        await resolver_ready(resolve_url)
        listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        config = {
            "listen": listen,
            "admin": admin,
            "routes": [{"name": "api", "prefix": "/", "upstream": upstream}],
            "rules": [RULE],
            "resolver": {
                "url": resolve_url,
                "budget_ms": 2000,
                "breaker_failures": 3,
                "breaker_cooldown_s": 600,
                "cache_ttl_s": 0,
            },
        }
        gateway = write_config(tmp_path, config)
        async with (
            supervised(gateway, admin, tmp_path, workers=None),
            aiohttp.ClientSession() as session,
        ):
            base = f"http://{listen}"
            for n in range(5):  # more than breaker_failures
                long_path = f"/items/{n}/" + "x" * 3000
                assert await available(session, base + long_path)
            assert await available(session, base + "/items/1")
            async with session.get(f"http://{admin}/metrics") as response:
                metrics = await response.text()
        assert 'mendpoint_resolver_outcomes_total{outcome="options"} 6.0' in metrics
        for outcome in ("error", "circuit_open", "unsendable"):
            assert f'mendpoint_resolver_outcomes_total{{outcome="{outcome}"}} 0.0' in metrics
    finally:
        code, _ = await stop_process(resolver)
        assert code in (0, -15)
