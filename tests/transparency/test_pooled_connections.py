"""Differential: a real uvicorn app that crashes, then good requests, direct and through us.

uvicorn closes the connection right after an unhandled-exception 500 that said nothing of
closing. Direct, each request here has a connection of its own; through the gateway the
clients keep their connections and the gateway pools its upstream connections, so a request
can meet one that is being closed. The answers must be the same: no 502, and every POST
reaches the app exactly once (never blamed "may have been processed" when it never arrived).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx

from tests.support.gateway import StartGateway, route_config
from tests.support.upstreams import uvicorn_server

CLIENTS = 10
ROUNDS = 5  # per client: a crash, then a GET and a POST; 50 of each in all


async def one_client(client: httpx.AsyncClient, base: str, name: int) -> Counter[tuple[str, int]]:
    outcomes: Counter[tuple[str, int]] = Counter()
    for round_ in range(ROUNDS):
        crashed = await client.get(f"{base}/boom")
        outcomes["GET /boom", crashed.status_code] += 1
        got = await client.get(f"{base}/items/{name}-{round_}")
        outcomes["GET", got.status_code] += 1
        posted = await client.post(f"{base}/items/{name}-{round_}", content=b"12345")
        outcomes["POST", posted.status_code] += 1
        if posted.status_code == 201:
            assert posted.json() == {"created": 5}
    return outcomes


async def run_clients(base: str, limits: httpx.Limits) -> Counter[tuple[str, int]]:
    async with httpx.AsyncClient(limits=limits) as client:
        counts = await asyncio.gather(*(one_client(client, base, n) for n in range(CLIENTS)))
    return sum(counts, Counter())


async def test_good_requests_right_after_a_crash_are_answered_as_direct(
    start_gateway: StartGateway,
) -> None:
    async with uvicorn_server() as upstream:
        gateway = await start_gateway(route_config(upstream, mode="envelope"))
        expected = await run_clients(upstream, httpx.Limits(max_keepalive_connections=0))
        got = await run_clients(gateway.url, httpx.Limits())
        async with httpx.AsyncClient() as check:
            seen = (await check.get(f"{upstream}/seen")).json()
    requests = CLIENTS * ROUNDS
    assert expected == {
        ("GET /boom", 500): requests,
        ("GET", 200): requests,
        ("POST", 201): requests,
    }
    assert got == expected
    # Each request reached the app once: nothing that had arrived was sent again.
    assert seen == {"boom": 2 * requests, "GET": 2 * requests, "POST": 2 * requests}
