"""The remote resolver client against real servers: valid, failing, hanging, garbage, huge."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.failure import Category
from gateway.resolve.breaker import CircuitBreaker, ResolverUnavailable, TTLCache
from gateway.resolve.catalog import Catalog
from gateway.resolve.local import ResolveQuery
from gateway.resolve.remote import RemoteResolver
from gateway.resolve.server import build_resolver_app
from gateway.resolve.service import RecoveryService
from tests.support.catalog import CATALOG
from tests.support.gateway import StartUpstream

QUERY = ResolveQuery(
    Category.VALIDATION_ERROR,
    "CSV_MALFORMED",
    "format_inspection",
    frozenset({"data:read"}),
    "POST /v1/csv",
)


def remote(
    url: str, threshold: int = 3, cooldown_s: float = 60, ttl_s: float = 0
) -> RemoteResolver:
    return RemoteResolver(
        url + "/v1/resolve", 0.3, CircuitBreaker(threshold, cooldown_s), TTLCache(16, ttl_s)
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def handler_app(handler: Handler) -> tuple[web.Application, list[int]]:
    calls: list[int] = []

    async def counted(request: web.Request) -> web.StreamResponse:
        calls.append(1)
        return await handler(request)

    app = web.Application()
    app.router.add_post("/v1/resolve", counted)
    return app, calls


async def test_against_the_real_resolver_server(start_upstream: StartUpstream) -> None:
    url = await start_upstream(build_resolver_app(RecoveryService(CATALOG, 3)))
    client = remote(url)
    try:
        options = await client.fetch(QUERY, "data", None)
    finally:
        await client.close()
    assert [o.skill_name for o in options] == ["csv.sniff", "schema.infer_csv_schema"]


async def test_resolver_server_rejects_bad_requests(start_upstream: StartUpstream) -> None:
    import aiohttp

    url = await start_upstream(build_resolver_app(RecoveryService(Catalog.build([], []), 3)))
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/resolve", data=b"{not json") as bad:
            assert bad.status == 400
            assert "invalid resolve request" in (await bad.json())["error"]
        async with session.post(url + "/v1/resolve", data=b"x" * 100_000) as big:
            assert big.status == 413
        body = {
            "failure": {"category": "NOPE", "code": "X", "intent": "i"},
            "caller": {"scopes": []},
            "context": {"operation": "op"},
        }
        async with session.post(url + "/v1/resolve", json=body) as wrong:
            assert wrong.status == 400


async def garbage(request: web.Request) -> web.Response:
    return web.Response(text="<html>not json</html>")


async def wrong_shape(request: web.Request) -> web.Response:
    return web.json_response({"options": [{"skill_name": 3}]})


async def server_error(request: web.Request) -> web.Response:
    return web.Response(status=500, text="boom")


async def redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("http://127.0.0.1:9/elsewhere")


async def huge(request: web.Request) -> web.Response:
    option = {"skill_name": "s", "skill_version": "1", "purpose": "p" * 900}
    return web.json_response({"options": [option] * 400})


async def hang(request: web.Request) -> web.Response:
    await asyncio.sleep(30)
    return web.json_response({"options": []})


async def test_every_kind_of_bad_answer_is_unavailable(start_upstream: StartUpstream) -> None:
    for handler in (garbage, wrong_shape, server_error, redirect, huge, hang):
        app, _ = handler_app(handler)
        client = remote(await start_upstream(app))
        started = time.monotonic()
        try:
            await client.fetch(QUERY, None, None)
        except ResolverUnavailable:
            pass
        else:
            raise AssertionError(f"{handler.__name__} was accepted")
        finally:
            await client.close()
        assert time.monotonic() - started < 1.5, handler.__name__


async def test_breaker_opens_then_probes_after_cooldown(start_upstream: StartUpstream) -> None:
    app, calls = handler_app(server_error)
    client = remote(await start_upstream(app), threshold=2, cooldown_s=0.2)
    try:
        for _ in range(5):
            with contextlib.suppress(ResolverUnavailable):
                await client.fetch(QUERY, None, None)
        assert len(calls) == 2 and client.breaker.open
        await asyncio.sleep(0.25)
        with contextlib.suppress(ResolverUnavailable):
            await client.fetch(QUERY, None, None)
        assert len(calls) == 3
    finally:
        await client.close()


async def test_answers_are_cached_by_scopes_code_and_intent(start_upstream: StartUpstream) -> None:
    seen: list[dict[str, object]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(json.loads(await request.read()))
        return web.json_response(
            {"options": [{"skill_name": "s", "skill_version": "1", "purpose": "p"}]}
        )

    app, calls = handler_app(answer)
    client = remote(await start_upstream(app), ttl_s=60)
    try:
        await client.fetch(QUERY, None, None)
        await client.fetch(QUERY, None, None)
        other_scopes = ResolveQuery(
            QUERY.category, QUERY.code, QUERY.intent, frozenset(), QUERY.operation
        )
        await client.fetch(other_scopes, None, None)
    finally:
        await client.close()
    assert len(calls) == 2
    assert len(client.cache) == 2
    assert seen[0] == {
        "failure": {
            "category": "VALIDATION_ERROR",
            "code": "CSV_MALFORMED",
            "intent": "format_inspection",
        },
        "caller": {"scopes": ["data:read"]},
        "context": {"route": None, "operation": "POST /v1/csv", "tool": None},
    }


def test_cache_is_bounded() -> None:
    cache = TTLCache(2, 60)
    for i in range(5):
        cache.put((str(i), "", "", "", ""), ())
    assert len(cache) == 2
    assert cache.get(("4", "", "", "", "")) == ()
    assert cache.get(("0", "", "", "", "")) is None
