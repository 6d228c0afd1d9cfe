"""The HTTP API behind the agents' tests and benchmark: one route per failure class.

`python orders_api.py PORT` serves on 127.0.0.1:PORT (aiohttp). Its errors are the raw
shapes real stacks send, for the gateway in front of it to classify with its shipped rules:

    GET  /quota/KEY   transient: a new KEY is limited for 0.2 s (429, `retry_after`: 0.2): a
                      call sooner gets the 429 again
    POST /orders      caller-correctable: `qty` must be a positive integer (400)
    POST /spring      caller-correctable, Spring's shape: its `error` is a string (400)
    GET  /items/ID    terminal: only item 1 exists (404, problem+json)
    POST /mail        terminal, possibly applied: the mail service fails (503, no Retry-After)
    POST /legacy      caller-correctable, its own `error.retryable: true` (400): the gateway
                      marks it not retryable, beside the upstream's word
    GET  /me          correctable with a command: 401 "token expired" until $API_TOKEN_FILE
                      exists (the tests' config names a `fix_command` that creates it)
    GET  /_hits       how many requests each path got (asked directly, not through a gateway)
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

hits: Counter[str] = Counter()
limited_until: dict[str, float] = {}
LIMIT_S = 0.2


async def quota(request: web.Request) -> web.Response:
    until = limited_until.setdefault(request.match_info["key"], time.monotonic() + LIMIT_S)
    if time.monotonic() < until:
        return web.json_response({"message": "slow down", "retry_after": 0.2}, status=429)
    return web.json_response({"remaining": 9})


async def orders(request: web.Request) -> web.Response:
    payload = await request.json()
    qty = payload.get("qty") if isinstance(payload, dict) else None
    if not isinstance(qty, int) or isinstance(qty, bool) or qty <= 0:
        return web.json_response({"message": "qty must be a positive integer"}, status=400)
    return web.json_response({"id": 7, "qty": qty}, status=201)


async def spring(request: web.Request) -> web.Response:
    body = {
        "timestamp": "2026-11-30T07:19:53.236+00:00",
        "status": 400,
        "error": "Bad Request",
        "message": "Required request parameter 'quantity' is not present",
        "path": "/spring",
    }
    return web.json_response(body, status=400)


async def legacy(request: web.Request) -> web.Response:
    body = {"error": {"code": 17, "message": "qty out of range", "retryable": True}}
    return web.json_response(body, status=400)


async def items(request: web.Request) -> web.Response:
    item = request.match_info["item"]
    if item == "1":
        return web.json_response({"id": 1, "name": "notebook"})
    problem = {"title": "Not Found", "status": 404, "detail": f"Item {item} does not exist"}
    return web.json_response(problem, status=404, content_type="application/problem+json")


async def mail(request: web.Request) -> web.Response:
    return web.json_response({"message": "mail service unavailable"}, status=503)


TOKEN = Path(os.environ.get("API_TOKEN_FILE", "/nonexistent"))


async def me(request: web.Request) -> web.Response:
    if await asyncio.to_thread(TOKEN.exists):
        return web.json_response({"agent": 7})
    challenge = 'Bearer error="invalid_token", error_description="The access token expired"'
    return web.json_response(
        {"error": "invalid_token", "error_description": "The access token expired"},
        status=401,
        headers={"WWW-Authenticate": challenge},
    )


async def count(request: web.Request) -> web.Response:
    return web.json_response(dict(hits))


@web.middleware
async def counted(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path != "/_hits":
        hits[request.path] += 1
    return await handler(request)


def app() -> web.Application:
    application = web.Application(middlewares=[counted])
    application.router.add_get("/quota/{key}", quota)
    application.router.add_post("/orders", orders)
    application.router.add_post("/spring", spring)
    application.router.add_post("/legacy", legacy)
    application.router.add_get("/items/{item}", items)
    application.router.add_post("/mail", mail)
    application.router.add_get("/me", me)
    application.router.add_get("/_hits", count)
    return application


if __name__ == "__main__":
    web.run_app(app(), host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
