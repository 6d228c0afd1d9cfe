"""Which answers the relay sends in one write (`relay.arrived_whole`), read with the real
upstream client from a raw upstream: a small body that came whole with its head, nothing
else. tests/transparency/test_small_bodies.py proves both kinds equal to going direct."""

from __future__ import annotations

import asyncio

import pytest
from multidict import CIMultiDict

from gateway.config.models import LimitsSpec
from gateway.exchange.relay import arrived_whole
from gateway.exchange.upstream.links import Origin
from gateway.exchange.upstream.pool import UpstreamClient
from tests.support.gateway import StartRaw
from tests.support.small_bodies import SHAPES, SHORTCUT, SPLIT_DELAY_S, serve_shapes


async def _arrived_whole(start_raw: StartRaw, method: str, path: str) -> bytes | None:
    upstream = await start_raw(serve_shapes)
    port = int(upstream.url.rsplit(":", 1)[1])
    client = UpstreamClient(LimitsSpec())
    try:
        headers = CIMultiDict({"Host": f"127.0.0.1:{port}"})
        response = await client.request(method, Origin("http", "127.0.0.1", port), path, headers)
        try:
            # A 64 KiB body may come a segment after its head; give it time to (not so long
            # that /split's body, SPLIT_DELAY_S later, could arrive).
            await asyncio.sleep(SPLIT_DELAY_S / 4)
            return arrived_whole(method, response)
        finally:
            response.close()
    finally:
        await client.close()


@pytest.mark.parametrize("path", SHORTCUT)
async def test_a_small_body_that_came_with_its_head_is_answered_whole(
    path: str, start_raw: StartRaw
) -> None:
    assert await _arrived_whole(start_raw, "GET", path) == SHAPES[path].body


@pytest.mark.parametrize("path", [p for p in SHAPES if p not in SHORTCUT])
async def test_everything_else_streams(path: str, start_raw: StartRaw) -> None:
    """Over the limit, still arriving, chunked, or a 304 whose Content-Length has no body."""
    assert await _arrived_whole(start_raw, "GET", path) is None


async def test_a_head_request_streams(start_raw: StartRaw) -> None:
    """HEAD: the Content-Length describes a body that never comes."""
    assert await _arrived_whole(start_raw, "HEAD", "/whole") is None
