"""Small successes answered in one write and streamed ones, direct and through the gateway
with curl: equal but for INTENDED, whichever side of the relay's shortcut an answer takes
(tests/exchange/test_small_bodies.py checks which side each shape takes)."""

from __future__ import annotations

import aiohttp
import pytest

from tests.support.curl import curl
from tests.support.differential import assert_equivalent
from tests.support.gateway import StartGateway, StartRaw, route_config
from tests.support.small_bodies import SHAPES, serve_shapes


@pytest.mark.parametrize("path", list(SHAPES))
async def test_a_small_or_streamed_body_is_the_same_as_direct(
    path: str, start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    upstream = await start_raw(serve_shapes)
    gateway = await start_gateway(route_config(upstream.url))
    direct = await curl(upstream.url + path)
    proxied = await curl(gateway.url + path)
    assert direct.status in (200, 304)
    assert_equivalent(direct, proxied)


@pytest.mark.parametrize("path", ["/whole", "/empty", "/not-modified"])
async def test_a_head_request_is_the_same_as_direct(
    path: str, start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """HEAD's Content-Length describes a body that is not sent: nothing may follow the head."""
    upstream = await start_raw(serve_shapes)
    gateway = await start_gateway(route_config(upstream.url))
    direct = await curl(upstream.url + path, "--head")
    proxied = await curl(gateway.url + path, "--head")
    assert direct.body == b""
    assert_equivalent(direct, proxied)


async def test_answers_of_both_kinds_share_one_client_connection(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """Every shape in turn, twice, on one keep-alive client connection: a one-write answer
    must leave the connection framed for the next answer, as a streamed one does."""
    upstream = await start_raw(serve_shapes)
    gateway = await start_gateway(route_config(upstream.url))
    paths = list(SHAPES) * 2
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        for path in paths:
            async with session.get(gateway.url + path) as response:
                assert response.status == SHAPES[path].status
                assert await response.read() == SHAPES[path].body
