"""Scripted agents and the upstream they talk to, for the follow-up tests.

Each agent has its own User-Agent, so with no callers configured each one is its own caller
(address plus User-Agent). `EXPECTED` is what the gateway must count for one run of all of them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from mendpoint_agents import Action, HttpAnswer, decide

THINK_S = 0.02
"""An agent's pause between answer and next request (real agents think far longer)."""

Send = Callable[[str, str, dict[str, Any] | None], Awaitable[tuple[int, dict[str, Any]]]]


def orders_app(on_request: Callable[[web.Request], None] | None = None) -> web.Application:
    """POST /orders wants a positive `qty` (400), 999 is taken (409); GET /quota allows one
    call per User-Agent per second (429 with Retry-After: 1 until then). `on_request` sees
    every request first (to note which gateway worker sent it)."""
    blocked_until: dict[str, float] = {}

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        if on_request is not None:
            on_request(request)
        return await handler(request)

    async def orders(request: web.Request) -> web.Response:
        payload = await request.json()
        qty = payload.get("qty")
        if not isinstance(qty, int) or qty <= 0:
            return web.json_response({"message": "qty must be a positive integer"}, status=400)
        if qty == 999:
            return web.json_response({"message": "order 999 already exists"}, status=409)
        return web.json_response({"id": qty}, status=201)

    async def quota(request: web.Request) -> web.Response:
        agent = request.headers.get("User-Agent", "")
        now = time.monotonic()
        until = blocked_until.get(agent)
        if until is None or now < until:
            if until is None:
                blocked_until[agent] = until = now + 1.0
            return web.json_response(
                {"message": "slow down"}, status=429, headers={"Retry-After": "1"}
            )
        return web.json_response({"remaining": 9})

    app = web.Application(middlewares=[observe])
    app.router.add_post("/orders", orders)
    app.router.add_get("/quota", quota)
    return app


async def retry_everything(send: Send) -> None:
    """Retries the same bad request three times, whatever the error says."""
    for _ in range(4):
        status, _body = await send("POST", "/orders", {"qty": -1})
        if status < 400:
            return
        await asyncio.sleep(THINK_S)


async def four_line_procedure(send: Send) -> None:
    """The reference procedure, `mendpoint_agents.decide` (docs/agents.md): retry → sleep
    retry_after_ms and reissue."""
    status, body = await send("GET", "/quota", None)
    decision = decide(HttpAnswer(status, {}, json.dumps(body).encode()))
    if decision.action is Action.RETRY:
        await asyncio.sleep((decision.retry_after_ms or 0) / 1000)
        await send("GET", "/quota", None)


async def ignores_retry_after(send: Send) -> None:
    """Retries a retryable failure at once, then gives up."""
    await send("GET", "/quota", None)
    await asyncio.sleep(THINK_S)
    await send("GET", "/quota", None)


async def fixes_the_body(send: Send) -> None:
    _status, body = await send("POST", "/orders", {"qty": 0})
    if body.get("error", {}).get("fix_required"):
        await asyncio.sleep(THINK_S)
        await send("POST", "/orders", {"qty": 3})


async def keeps_failing(send: Send) -> None:
    """Changes the request, but not the way the fix asks: the same code again, then stops."""
    await send("POST", "/orders", {"qty": -5})
    await asyncio.sleep(THINK_S)
    await send("POST", "/orders", {"qty": "five"})


async def fails_differently(send: Send) -> None:
    await send("POST", "/orders", {})
    await asyncio.sleep(THINK_S)
    await send("POST", "/orders", {"qty": 999})


async def stops(send: Send) -> None:
    await send("POST", "/orders", {"qty": -1})


AGENTS: dict[str, Callable[[Send], Awaitable[None]]] = {
    "retry-everything": retry_everything,
    "four-line": four_line_procedure,
    "ignores-retry-after": ignores_retry_after,
    "fixes-the-body": fixes_the_body,
    "keeps-failing": keeps_failing,
    "fails-differently": fails_differently,
    "stops": stops,
}

ZERO = {
    "abandoned": 0,
    "retried_unchanged": 0,
    "retried_too_early": 0,
    "retried_as_advised": 0,
    "recovered": 0,
    "failed_again_same_code": 0,
    "failed_differently": 0,
}
EXPECTED: dict[str, dict[str, int]] = {
    # 4 + 1 + 2 + 1 + 1 failures: every one settled exactly once.
    "BAD_REQUEST": ZERO
    | {
        "failures": 9,
        "retried_unchanged": 3,
        "abandoned": 3,
        "recovered": 1,
        "failed_again_same_code": 1,
        "failed_differently": 1,
    },
    "RATE_LIMITED": ZERO
    | {"failures": 3, "retried_as_advised": 1, "retried_too_early": 1, "abandoned": 1},
    "CONFLICT": ZERO | {"failures": 1, "abandoned": 1},
}


class AgentClient:
    """One agent's HTTP client: a keep-alive pool, or a new connection for every request."""

    def __init__(self, base_url: str, agent: str, *, fresh_connections: bool) -> None:
        self.base_url = base_url
        self.agent = agent
        self.fresh_connections = fresh_connections
        self._session: aiohttp.ClientSession | None = None

    async def send(
        self, method: str, path: str, payload: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        if self._session is None:
            connector = aiohttp.TCPConnector(force_close=self.fresh_connections)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": self.agent}
            )
        async with self._session.request(method, self.base_url + path, json=payload) as answer:
            body = await answer.json(content_type=None)
            return answer.status, body if isinstance(body, dict) else {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


async def run_all(base_url: str) -> None:
    """Every agent at once; half keep a pool, half open a connection per request."""
    clients = [
        AgentClient(base_url, name, fresh_connections=index % 2 == 0)
        for index, name in enumerate(AGENTS)
    ]
    try:
        await asyncio.gather(*(AGENTS[c.agent](c.send) for c in clients))
    finally:
        for client in clients:
            await client.close()


def counts_by_code(codes: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    keys = ("failures", *ZERO)
    return {row["code"]: {k: row[k] for k in keys} for row in codes}
