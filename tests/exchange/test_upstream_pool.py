"""The upstream client's connection pool, seen from a real upstream over loopback.

What the pool promises: a kept-alive connection carries many requests; never more than
`limits.max_upstream_connections` are open; a connection whose exchange did not end cleanly is
never reused; idle connections are closed after `upstream_idle_timeout_s`; an upstream that closed
an idle connection costs nothing; interim 1xx answers are skipped; `total_timeout_s` bounds
the body as well as the head.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.gateway import RawHandler, StartGateway, StartRaw, StartUpstream, route_config


@dataclass
class Peers:
    """Which client ports (one per upstream connection) the upstream saw, and how many at once."""

    ports: list[int] = field(default_factory=list)
    active: int = 0
    most: int = 0


def peer_port(request: web.Request) -> int:
    assert request.transport is not None
    port: int = request.transport.get_extra_info("peername")[1]
    return port


def tracking_app(peers: Peers, delay_s: float = 0.0) -> web.Application:
    async def ok(request: web.Request) -> web.Response:
        peers.ports.append(peer_port(request))
        peers.active += 1
        peers.most = max(peers.most, peers.active)
        try:
            await asyncio.sleep(delay_s)
        finally:
            peers.active -= 1
        return web.json_response({"ok": True})

    async def big(request: web.Request) -> web.StreamResponse:
        peers.ports.append(peer_port(request))
        response = web.StreamResponse()
        await response.prepare(request)
        try:
            for _ in range(200):
                await response.write(b"x" * 65536)
                await asyncio.sleep(0.01)
        except (ConnectionError, RuntimeError):
            pass
        return response

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/big", big)
    return app


async def test_sequential_requests_share_one_upstream_connection(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    peers = Peers()
    gateway = await start_gateway(route_config(await start_upstream(tracking_app(peers))))
    for _ in range(20):
        async with gateway.session.get(gateway.url + "/ok") as response:
            assert response.status == 200
            assert await response.json() == {"ok": True}
    assert len(peers.ports) == 20
    assert len(set(peers.ports)) == 1


async def test_open_connections_never_exceed_the_cap(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    peers = Peers()
    upstream = await start_upstream(tracking_app(peers, delay_s=0.2))
    config = route_config(upstream) | {"limits": {"max_upstream_connections": 2}}
    gateway = await start_gateway(config)

    async def one() -> int:
        async with (
            aiohttp.ClientSession() as session,  # its own client connection each
            session.get(gateway.url + "/ok") as response,
        ):
            await response.read()
            return response.status

    statuses = await asyncio.gather(*(one() for _ in range(6)))
    assert statuses == [200] * 6
    assert peers.most == 2
    assert len(set(peers.ports)) == 2


async def test_a_connection_left_mid_body_is_not_reused(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    peers = Peers()
    gateway = await start_gateway(route_config(await start_upstream(tracking_app(peers))))
    async with aiohttp.ClientSession() as session, session.get(gateway.url + "/big") as response:
        assert response.status == 200
        await response.content.readexactly(65536)
        response.close()  # the client leaves with most of the body unsent
    await asyncio.sleep(0.1)
    async with gateway.session.get(gateway.url + "/ok") as response:
        assert response.status == 200
    assert len(peers.ports) == 2
    assert peers.ports[0] != peers.ports[1]


OK_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every request on the connection until the gateway closes it."""
    while True:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(OK_RESPONSE)
        await writer.drain()


async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer one request as if keeping the connection, then close it while it idles."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(OK_RESPONSE)
    await writer.drain()


async def test_idle_connections_are_closed_after_the_keepalive_timeout(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    upstream = await start_raw(keep_alive)
    config = route_config(upstream.url) | {"limits": {"upstream_idle_timeout_s": 0.3}}
    gateway = await start_gateway(config)
    async with gateway.session.get(gateway.url + "/x") as response:
        assert await response.read() == b"ok"
    answered = time.monotonic()
    for _ in range(40):
        if upstream.closed_at:
            break
        await asyncio.sleep(0.05)
    assert upstream.closed_at, "the idle upstream connection was never closed"
    assert 0.25 <= upstream.closed_at[0] - answered <= 1.5


async def test_an_upstream_closing_idle_connections_costs_no_request(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    upstream = await start_raw(one_then_close)
    gateway = await start_gateway(route_config(upstream.url))
    for _ in range(5):
        async with gateway.session.get(gateway.url + "/x") as response:
            assert response.status == 200
            assert await response.read() == b"ok"
        await asyncio.sleep(0.05)  # the close reaches the gateway before the next request
    assert upstream.connections == 5


@pytest.mark.parametrize(
    "interim",
    [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"],
)
async def test_interim_answers_are_skipped(
    interim: bytes,
    start_raw: StartRaw,
    start_gateway: StartGateway,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(interim + OK_RESPONSE)
        await writer.drain()

    gateway = await start_gateway(route_config((await start_raw(handler)).url))
    async with gateway.session.get(gateway.url + "/x") as response:
        assert response.status == 200
        assert await response.read() == b"ok"
        assert "Link" not in response.headers


async def test_total_timeout_bounds_the_body_too(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.05)

    upstream = await start_raw(drip)
    config = route_config(upstream.url) | {"limits": {"total_timeout_s": 0.5}}
    gateway = await start_gateway(config)
    started = time.monotonic()
    async with gateway.session.get(gateway.url + "/x") as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
    assert time.monotonic() - started < 3.0


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (and its key), made with the system's openssl."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def https_upstream(cert: Path, key: Path) -> tuple[web.AppRunner, str]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    app = web.Application()

    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"tls": True})

    app.router.add_get("/ok", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"https://127.0.0.1:{port}"


async def test_https_upstream_is_verified_against_the_trust_store(
    self_signed: tuple[Path, Path], start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Untrusted certificate: a 502 before anything is sent. Trusted: the answer."""
    runner, url = await https_upstream(*self_signed)
    try:
        untrusted = await start_gateway(route_config(url, mode="envelope"))
        async with untrusted.session.get(untrusted.url + "/ok") as response:
            assert response.status == 502
            body = await response.json()
            assert body["failure"]["code"] == "UPSTREAM_TLS_ERROR"
        monkeypatch.setenv(
            "SSL_CERT_FILE", str(self_signed[0])
        )  # read when a client first needs TLS
        trusted = await start_gateway(route_config(url))
        async with trusted.session.get(trusted.url + "/ok") as response:
            assert response.status == 200
            assert await response.json() == {"tls": True}
    finally:
        await runner.cleanup()


async def test_head_answers_leave_the_connection_in_step(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """A HEAD answer announces a length but has no body: the next answer must not be eaten."""
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(head.split(b" ", 1)[0])
            if head.startswith(b"HEAD"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
            else:
                writer.write(OK_RESPONSE)
            await writer.drain()

    upstream = await start_raw(handler)
    gateway = await start_gateway(route_config(upstream.url))
    for method in ("HEAD", "GET", "HEAD", "GET"):
        async with gateway.session.request(method, gateway.url + "/x") as response:
            assert response.status == 200
            assert await response.read() == (b"" if method == "HEAD" else b"ok")
    assert seen == [b"HEAD", b"GET", b"HEAD", b"GET"]
    assert upstream.connections == 1


async def test_bytes_after_a_complete_answer_never_reach_the_next_request(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """An upstream that writes more than it framed: the leftover is not a response to anyone."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            smuggled = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
            writer.write(OK_RESPONSE + smuggled)
            await writer.drain()

    upstream = await start_raw(handler)
    gateway = await start_gateway(route_config(upstream.url))
    for _ in range(4):
        async with gateway.session.get(gateway.url + "/x") as response:
            assert await response.read() == b"ok"
        await asyncio.sleep(0.02)
    assert upstream.connections == 4  # each leftover condemned its connection


async def test_an_early_answer_stops_the_upload_and_retires_the_connection(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """The upstream refuses before the body is in: the client gets that answer, and the half-sent
    connection is never reused."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"POST"):
            refusal = b'{"error":"too big"}'
            writer.write(
                b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(refusal), refusal)
            )
            await writer.drain()
            await asyncio.sleep(1.0)  # keep reading nothing; the gateway must not wait on us
            return
        writer.write(OK_RESPONSE)
        await writer.drain()

    upstream = await start_raw(handler)
    gateway = await start_gateway(route_config(upstream.url, mode="original"))

    async def slow_body() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"x" * 65536
            await asyncio.sleep(0.05)

    started = time.monotonic()
    async with gateway.session.post(gateway.url + "/upload", data=slow_body()) as response:
        assert response.status == 413
        assert await response.json() == {"error": "too big"}
    assert time.monotonic() - started < 3.0
    async with gateway.session.get(gateway.url + "/x") as response:
        assert await response.read() == b"ok"
    assert upstream.connections == 2


def dripping(pause_s: float, count: int, then_stall: bool) -> RawHandler:
    """Send a head for `count` bytes, then one byte every `pause_s`; maybe stall at the end."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        total = count + (1 if then_stall else 0)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        for _ in range(count):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(pause_s)
        if then_stall:
            await asyncio.sleep(5)

    return handler


async def test_read_timeout_restarts_on_every_byte(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """Bytes 0.1 s apart for 1.2 s under a 0.35 s read timeout: the body arrives whole."""
    upstream = await start_raw(dripping(0.1, 12, then_stall=False))
    gateway = await start_gateway(route_config(upstream.url) | {"limits": {"read_timeout_s": 0.35}})
    async with gateway.session.get(gateway.url + "/x") as response:
        assert await response.read() == b"x" * 12


async def test_read_timeout_ends_a_stalled_body(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """A body that stops arriving is cut (the client connection aborted) one timeout later."""
    upstream = await start_raw(dripping(0.05, 4, then_stall=True))
    gateway = await start_gateway(route_config(upstream.url) | {"limits": {"read_timeout_s": 0.35}})
    started = time.monotonic()
    async with gateway.session.get(gateway.url + "/x") as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
    assert 0.35 <= time.monotonic() - started < 2.5


BIG_BODY = 32 * 1024 * 1024  # more than loopback's socket buffers hold: reading must pause
BIG_PIECE = b"y" * (1024 * 1024)


def flooding(then_stall: bool) -> RawHandler:
    """Send a 32 MiB body as fast as the gateway takes it; maybe stall before its last byte."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        total = BIG_BODY + (1 if then_stall else 0)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        for _ in range(BIG_BODY // len(BIG_PIECE)):
            writer.write(BIG_PIECE)
            await writer.drain()
        if then_stall:
            await asyncio.sleep(10)

    return handler


async def _read_after_a_pause(response: aiohttp.ClientResponse, pause_s: float) -> int:
    """Read a little, take nothing for `pause_s` (the gateway must stop reading the upstream
    meanwhile), then read the rest; the number of bytes read."""
    received = len(await response.content.readany())
    await asyncio.sleep(pause_s)
    async for chunk in response.content.iter_any():
        received += len(chunk)
    return received


async def test_read_timeout_ignores_a_client_slower_than_it(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """A client that takes nothing for three read timeouts: the gateway pauses reading the
    upstream (flow control), and a pause is not upstream silence, so the body arrives whole."""
    upstream = await start_raw(flooding(then_stall=False))
    gateway = await start_gateway(route_config(upstream.url) | {"limits": {"read_timeout_s": 0.3}})
    async with gateway.session.get(gateway.url + "/x") as response:
        assert response.status == 200
        assert await _read_after_a_pause(response, 1.0) == BIG_BODY


async def test_read_timeout_ends_a_body_that_stalls_after_a_pause(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    """The timer kept through flow-control pauses still cuts an upstream that goes silent
    once reading resumed: the client connection is aborted about one timeout later."""
    upstream = await start_raw(flooding(then_stall=True))
    gateway = await start_gateway(route_config(upstream.url) | {"limits": {"read_timeout_s": 0.3}})
    started = time.monotonic()
    async with gateway.session.get(gateway.url + "/x") as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await _read_after_a_pause(response, 1.0)
    assert 1.3 <= time.monotonic() - started < 5.0
