"""Fair shares of the upstream pool (docs/transparency.md#fair-shares-of-the-pool).

Long-lived streams leave the request limits once the pool knows them for streams (an SSE
answer at once, any answer with no declared end once it has flowed for
`OPEN_ENDED_STREAM_S`), so they cannot starve short requests; each route holds at most its
`max_connections`; and when the gateway's own limit is why a request got no connection, the
answer says so: 503 `GATEWAY_UPSTREAM_LIMIT`, retryable (nothing was sent), counted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.exchange.shares import OPEN_ENDED_STREAM_S
from gateway.exchange.state import UPSTREAM
from gateway.exchange.upstream.pool import UpstreamClient
from gateway.telemetry.metrics import REGISTRY
from tests.support.gateway import (
    RunningGateway,
    StartGateway,
    StartUpstream,
    route_config,
    write_config,
)
from tests.support.mcp import INIT

EVENT_EVERY_S = 0.05


@dataclass
class Upstream:
    """Streams that never end (SSE, or JSON lines with no declared length), a quick answer,
    and one held until the test lets it go; what reached it, by path."""

    hits: dict[str, int] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/events", self.events)
        app.router.add_get("/lines", self.lines)
        app.router.add_route("*", "/ok", self.ok)
        app.router.add_get("/held", self.hold)
        app.router.add_route("*", "/mcp", self.hold)  # an MCP server that takes its time
        return app

    def count(self, request: web.Request) -> None:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        assert request.transport is not None
        self.ports.append(request.transport.get_extra_info("peername")[1])

    async def events(self, request: web.Request) -> web.StreamResponse:
        """SSE; `?n=N` ends after N events (cleanly: the connection may be pooled again)."""
        self.count(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        total = int(request.query.get("n", "0")) or None
        sent = 0
        while total is None or sent < total:
            await response.write(f"id: {sent}\ndata: tick\n\n".encode())
            sent += 1
            await asyncio.sleep(EVENT_EVERY_S)
        await response.write_eof()
        return response

    async def lines(self, request: web.Request) -> web.StreamResponse:
        self.count(request)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        while True:
            await response.write(b'{"type":"ADDED"}\n')
            await asyncio.sleep(EVENT_EVERY_S)

    async def ok(self, request: web.Request) -> web.Response:
        self.count(request)
        await request.read()
        return web.json_response({"ok": True})

    async def hold(self, request: web.Request) -> web.Response:
        self.count(request)
        self.held += 1
        await self.release.wait()
        return web.json_response({"held": True})


@pytest.fixture
async def upstream(start_upstream: StartUpstream) -> tuple[Upstream, str]:
    found = Upstream()
    return found, await start_upstream(found.app())


def config(base: str, **limits: Any) -> dict[str, Any]:
    # A short wait for a free connection (2 x connect_timeout_s) keeps refusals quick.
    settings = route_config(base, mode="envelope")
    settings["limits"] = {"connect_timeout_s": 0.25, **limits}
    return settings


def pool(gateway: RunningGateway) -> UpstreamClient:
    return gateway.server.app[UPSTREAM]


@asynccontextmanager
async def stream(gateway: RunningGateway, path: str) -> AsyncIterator[aiohttp.ClientResponse]:
    """A stream through the gateway on its own client connection, its first line read."""
    async with aiohttp.ClientSession() as session, session.get(gateway.url + path) as response:
        assert response.status == 200
        assert await response.content.readline()
        yield response


async def wait_for(check: Any, what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(what)


def refusals(route: str, limit: str) -> float:
    value = REGISTRY.get_sample_value(
        "mendpoint_upstream_pool_refusals_total", {"route": route, "limit": limit}
    )
    return value or 0.0


async def test_open_streams_leave_short_requests_their_connections(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    """More SSE streams than the pool has connections: every one is served, and a short
    request still gets a connection at once (before: it waited and got 504
    UPSTREAM_CONNECT_TIMEOUT, blaming an idle upstream)."""
    found, base = upstream
    gateway = await start_gateway(config(base, max_upstream_connections=4))
    async with AsyncExitStack() as streams:
        for _ in range(6):
            await streams.enter_async_context(stream(gateway, "/events"))
        assert pool(gateway).counts()[1] == 6
        async with gateway.session.get(gateway.url + "/ok") as response:
            assert response.status == 200  # not 503 after the wait: a connection was free
            assert await response.json() == {"ok": True}
    assert found.hits["/ok"] == 1
    # Once the streams are gone, their connections are counted again as they close.
    await wait_for(lambda: pool(gateway).counts()[1] == 0, "streams still counted")
    assert pool(gateway).counts()[0] <= 4


async def test_a_full_pool_is_the_gateways_own_retryable_refusal(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    """Every connection held by requests in progress: the next request is not sent, and the
    answer names the gateway's limit, not the upstream; retryable even for a POST."""
    found, base = upstream
    gateway = await start_gateway(config(base, max_upstream_connections=2))
    before = refusals("api", "total")
    held = [asyncio.ensure_future(gateway.session.get(gateway.url + "/held")) for _ in range(2)]
    await wait_for(lambda: found.held == 2, "the held requests never arrived")
    async with aiohttp.ClientSession() as session:
        begun = time.monotonic()
        async with session.post(gateway.url + "/ok", json={"n": 1}) as response:
            waited = time.monotonic() - begun
            body = json.loads(await response.read())
            headers = response.headers
    assert response.status == 503
    error = body["error"]
    assert (error["code"], error["retryable"], error["retry_after_ms"]) == (
        "GATEWAY_UPSTREAM_LIMIT",
        True,
        1000,
    )
    assert "limits.max_upstream_connections" in error["message"] and "2 " in error["message"]
    assert error["fix_required"] is None
    assert body["failure"]["category"] == "UNAVAILABLE"
    assert body["meta"]["refusal"] == "upstream_connections"
    assert headers["Retry-After"] == "1"
    assert waited >= 0.45  # it waited (2 x connect_timeout_s) for a connection first
    assert "/ok" not in found.hits  # nothing was sent
    assert refusals("api", "total") == before + 1
    found.release.set()
    for answer in await asyncio.gather(*held):
        assert answer.status == 200
        answer.release()
    async with gateway.session.post(gateway.url + "/ok", json={"n": 2}) as response:
        assert response.status == 200


async def test_each_route_holds_at_most_its_share(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    """A route at its `max_connections` is refused while another route to the same upstream
    is served."""
    found, base = upstream
    settings = config(base)
    settings["routes"] = [
        {
            "name": "narrow",
            "prefix": "/narrow",
            "upstream": base,
            "strip_prefix": True,
            "max_connections": 1,
            "mode": "envelope",
        },
        {"name": "wide", "prefix": "/wide", "upstream": base, "strip_prefix": True},
    ]
    gateway = await start_gateway(settings)
    before = refusals("narrow", "route")
    held = asyncio.ensure_future(gateway.session.get(gateway.url + "/narrow/held"))
    await wait_for(lambda: found.held == 1, "the held request never arrived")
    async with aiohttp.ClientSession() as session:
        async with session.get(gateway.url + "/narrow/ok") as refused:
            body = json.loads(await refused.read())
        async with session.get(gateway.url + "/wide/ok") as served:
            assert served.status == 200
    assert refused.status == 503
    assert body["error"]["code"] == "GATEWAY_UPSTREAM_LIMIT"
    assert body["meta"]["refusal"] == "route_connections"
    message = body["error"]["message"]
    assert "routes[].max_connections" in message and "The 1 " in message
    assert "narrow" not in json.dumps(body)  # it names no route
    assert found.hits["/ok"] == 1
    assert refusals("narrow", "route") == before + 1
    found.release.set()
    (await held).release()


async def test_an_answer_with_no_declared_end_becomes_a_stream_once_it_has_flowed(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    """Not SSE, but chunked with no end in sight (JSON lines, a watch): after
    `OPEN_ENDED_STREAM_S` of flowing it is set apart, and the request waiting at the full
    pool gets its connection."""
    _, base = upstream
    settings = config(base, max_upstream_connections=1)
    settings["limits"]["connect_timeout_s"] = OPEN_ENDED_STREAM_S * 2  # waits long enough
    gateway = await start_gateway(settings)
    async with stream(gateway, "/lines"):
        assert pool(gateway).counts() == (1, 0)  # a request until it has flowed a while
        begun = time.monotonic()
        async with gateway.session.get(gateway.url + "/ok") as response:
            assert response.status == 200
        assert time.monotonic() - begun >= OPEN_ENDED_STREAM_S * 0.5  # it was not at once
        assert pool(gateway).counts() == (1, 1)


async def test_streams_over_their_limit_share_the_pool_until_room_comes(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    """Past `max_upstream_streams` a stream stays counted as a request (it cannot be refused
    once answered); when a stream ends, one of those is set apart and a waiting request
    gets its place."""
    _, base = upstream
    gateway = await start_gateway(config(base, max_upstream_connections=2, max_upstream_streams=1))
    async with AsyncExitStack() as streams:
        await streams.enter_async_context(stream(gateway, "/events"))
        first = AsyncExitStack()
        await first.enter_async_context(stream(gateway, "/events"))
        await streams.enter_async_context(stream(gateway, "/events"))
        assert pool(gateway).counts() == (2, 1)
        async with gateway.session.get(gateway.url + "/ok") as refused:
            assert refused.status == 503
            assert (await refused.json())["meta"]["refusal"] == "upstream_connections"
        await first.aclose()  # a stream ends: its place goes to a waiting one
        await wait_for(lambda: sum(pool(gateway).counts()) == 2, "the stream never ended")
        async with gateway.session.get(gateway.url + "/ok") as served:
            assert served.status == 200
        assert pool(gateway).counts()[1] == 1


async def test_a_stream_that_ends_gives_its_connection_back_to_the_pool(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    found, base = upstream
    gateway = await start_gateway(config(base, max_upstream_connections=1))
    async with gateway.session.get(gateway.url + "/events?n=3") as response:
        assert response.status == 200
        assert (await response.read()).count(b"data: tick") == 3
    assert pool(gateway).counts() == (1, 0)  # idle in the pool again
    async with gateway.session.get(gateway.url + "/ok") as response:
        assert response.status == 200
    assert found.ports[0] == found.ports[1]  # the same upstream connection


async def test_an_mcp_route_refuses_the_same_way(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    found, base = upstream
    settings = config(base)
    settings["routes"] = [
        {
            "name": "tools",
            "prefix": "/mcp",
            "type": "mcp",
            "upstream": base,
            "max_connections": 1,
            "mode": "envelope",
        },
    ]
    gateway = await start_gateway(settings)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = json.dumps(INIT)
    held = asyncio.ensure_future(
        gateway.session.post(gateway.url + "/mcp", data=init, headers=headers)
    )
    await wait_for(lambda: found.held == 1, "the held request never arrived")
    async with (
        aiohttp.ClientSession() as session,
        session.post(gateway.url + "/mcp", data=init, headers=headers) as refused,
    ):
        body = json.loads(await refused.read())
    assert refused.status == 503
    assert body["error"]["code"] == "GATEWAY_UPSTREAM_LIMIT"
    assert body["error"]["retryable"] is True  # a POST, but nothing was sent
    assert body["meta"]["refusal"] == "route_connections"
    assert found.held == 1
    found.release.set()
    (await held).release()


@pytest.mark.slow
async def test_the_reported_case_260_streams_against_the_default_pool(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    """The case as found: 260 open SSE `GET`s against the default pool of 256, then a short
    `GET`: answered at once, where it waited 10 s for a 504 before."""
    found, base = upstream
    gateway = await start_gateway(route_config(base))
    async with AsyncExitStack() as streams:
        opened = [stream(gateway, "/events") for _ in range(260)]
        await asyncio.gather(*(streams.enter_async_context(s) for s in opened))
        assert pool(gateway).counts()[1] == 260
        begun = time.monotonic()
        async with gateway.session.get(gateway.url + "/ok") as response:
            assert response.status == 200
        assert time.monotonic() - begun < 5  # no wait for a connection (it was 10 s)
    assert found.hits["/ok"] == 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"routes": [{"name": "b", "type": "mcp", "command": ["srv"], "max_connections": 4}]},
            r"gateway.yaml:\d+: routes\[0\].*max_connections is only for routes with an upstream",
        ),
        (
            {"routes": [{"name": "a", "upstream": "http://x", "max_connections": 0}]},
            r"gateway.yaml:\d+: routes\[0\].max_connections: .*greater than or equal to 1",
        ),
        (
            {
                "routes": [{"name": "a", "upstream": "http://x"}],
                "limits": {"max_upstream_streams": -1},
            },
            r"gateway.yaml:\d+: limits.max_upstream_streams: .*greater than or equal to 0",
        ),
    ],
    ids=["bridge-route", "zero", "negative-streams"],
)
def test_the_limits_are_validated_with_file_and_line(
    settings: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(str(write_config(tmp_path, settings)))
