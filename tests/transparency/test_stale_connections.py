"""Pooled upstream connections that the upstream closed: never the caller's problem.

Raw-socket upstreams make each race deterministic. What a request gets through the gateway
must be what it gets direct on a connection of its own: the upstream's answer. A request is
sent a second time only when a *reused* connection died before any byte of an answer and the
request is safe to replay (idempotent, body small enough to have been kept); anything else
is answered as the failure it is, and never replayed.
"""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

import gateway.exchange.upstream.links as upstream_client
from gateway.telemetry.metrics import REGISTRY
from tests.support.gateway import StartGateway, StartRaw, route_config

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
CRASH = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\ncrash"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request: its head and a Content-Length body (all these tests send)."""
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head


class Upstream:
    """Notes each request line it reads, per connection."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, bytes]] = []
        self.connections = 0

    def saw(self, head: bytes) -> None:
        self.requests.append((self.connections, head.split(b"\r\n", 1)[0]))


async def test_after_a_5xx_a_request_that_cannot_be_replayed_gets_a_fresh_connection(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """uvicorn's way: a 500 without `Connection: close`, then the close a moment later."""
    seen = Upstream()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections += 1
        while True:
            head = await read_request(reader)
            seen.saw(head)
            if head.startswith(b"GET /boom"):
                writer.write(CRASH)
                await writer.drain()
                await asyncio.sleep(0.2)  # logging the traceback; then the close
                return
            writer.write(OK)
            await writer.drain()

    upstream = await start_raw(handler)
    gateway = await start_gateway(route_config(upstream.url, mode="original"))
    async with httpx.AsyncClient() as client:
        crashed = await client.get(gateway.url + "/boom")
        posted = await client.post(gateway.url + "/orders", content=b"{}")
    assert (crashed.status_code, crashed.content) == (500, b"crash")
    assert (posted.status_code, posted.content) == (200, b"ok")
    assert seen.requests == [(1, b"GET /boom HTTP/1.1"), (2, b"POST /orders HTTP/1.1")]


def closes_second_request_unanswered(seen: Upstream):  # type: ignore[no-untyped-def]
    """The first connection answers once, then closes on the next request (a keep-alive
    timeout crossing it on the wire); later connections answer everything."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections += 1
        first_connection = seen.connections == 1
        answered = 0
        while True:
            head = await read_request(reader)
            seen.saw(head)
            if first_connection and answered == 1:
                return  # closed without a byte of an answer
            writer.write(OK)
            await writer.drain()
            answered += 1

    return handler


REPLAY_CASES = [
    pytest.param("GET", 0, True, id="GET-replayed"),
    pytest.param("DELETE", 0, True, id="DELETE-replayed"),
    pytest.param("PUT", 100, True, id="PUT-small-body-replayed"),
    pytest.param("PUT", 200_000, False, id="PUT-large-body-not-replayed"),
    pytest.param("POST", 100, False, id="POST-not-replayed"),
]


@pytest.mark.parametrize(("method", "size", "replayed"), REPLAY_CASES)
async def test_a_dead_reused_connection_is_replayed_only_when_safe(
    method: str, size: int, replayed: bool, start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    seen = Upstream()
    upstream = await start_raw(closes_second_request_unanswered(seen))
    gateway = await start_gateway(route_config(upstream.url, mode="envelope"))
    replays_before = REGISTRY.get_sample_value("mendpoint_upstream_replays_total") or 0.0
    async with httpx.AsyncClient() as client:
        first = await client.get(gateway.url + "/warm")
        second = await client.request(method, gateway.url + "/thing", content=b"x" * size)
    assert first.status_code == 200
    line = f"{method} /thing HTTP/1.1".encode()
    replays = REGISTRY.get_sample_value("mendpoint_upstream_replays_total") or 0.0
    assert replays - replays_before == (1.0 if replayed else 0.0)
    if replayed:
        assert (second.status_code, second.content) == (200, b"ok")
        assert seen.requests[1:] == [(1, line), (2, line)]
        return
    assert second.status_code == 502
    error = second.json()["error"]
    assert error["code"] == "UPSTREAM_CONNECTION_LOST"
    assert error["retryable"] is (method != "POST")
    assert seen.requests[1:] == [(1, line)]  # sent once, never again


async def test_keep_alive_timeout_from_the_upstream_is_honoured(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """`Keep-Alive: timeout=1`: a request 0.7 s later goes on a new connection, so it never
    crosses the upstream's close on the wire."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(OK.replace(b"\r\n\r\n", b"\r\nKeep-Alive: timeout=1\r\n\r\n", 1))
            await writer.drain()

    upstream = await start_raw(handler)
    limits = {"upstream_idle_timeout_s": 30}  # our own limit is far away
    gateway = await start_gateway(route_config(upstream.url) | {"limits": limits})
    async with httpx.AsyncClient() as client:
        assert (await client.get(gateway.url + "/x")).status_code == 200
        assert (await client.get(gateway.url + "/x")).status_code == 200
        assert upstream.connections == 1  # kept alive while fresh
        await asyncio.sleep(0.7)
        assert (await client.get(gateway.url + "/x")).status_code == 200
    assert upstream.connections == 2


@pytest.mark.parametrize(
    ("value", "limit"),
    [("timeout=5", 4.0), ("Timeout=5, max=100", 4.0), ("timeout=1", 0.5), ("max=3", 10.0)],
)
def test_keep_alive_limit_stays_below_the_upstreams_timeout(value: str, limit: float) -> None:
    assert upstream_client.keep_alive_limit(value, 10.0) == limit


def test_a_close_waiting_in_the_kernel_is_seen_before_reuse() -> None:
    ours, theirs = socket.socketpair()
    try:
        assert not upstream_client.peer_closed(ours.fileno())
        theirs.close()
        assert upstream_client.peer_closed(ours.fileno())
    finally:
        ours.close()
