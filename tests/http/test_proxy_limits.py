"""Limits (docs/security.md): request body and header size, client connections, C parser, memory.

Oversized or malformed requests must get a clear 4xx without reaching the upstream; the
connection cap answers 503 before parsing anything; and a large body streams through in
bounded memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from aiohttp import web
from yarl import URL

from tests.support.gateway import (
    Counter,
    RawResponse,
    RunningGateway,
    StartGateway,
    StartUpstream,
    exchange_framed,
    route_config,
)
from tests.support.paths import REPO

LIMIT = 4096


@pytest.fixture
async def counter(start_upstream: StartUpstream) -> tuple[Counter, str]:
    upstream = Counter()
    return upstream, await start_upstream(upstream.app())


def limited(base: str, **limits: object) -> dict[str, object]:
    return {**route_config(base), "limits": {"max_request_body_bytes": LIMIT, **limits}}


async def exchange(gateway: RunningGateway, data: bytes, *, within: float = 10) -> RawResponse:
    """Write raw bytes to the gateway and read one response, framed by its Content-Length."""
    return await exchange_framed(gateway.url, data, within)


# --- request body size ------------------------------------------------------------------


@pytest.mark.parametrize("size", [LIMIT + 1, 10 * LIMIT], ids=["limit+1", "10x"])
async def test_declared_length_over_the_limit_is_413_without_contacting_upstream(
    size: int, counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    upstream, base = counter
    gateway = await start_gateway(limited(base))
    head = f"POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: {size}\r\n\r\n"
    response = await exchange(gateway, head.encode() + b"x" * size)
    assert response.status == 413
    # The route's mode (additive) applies to the gateway's own answers too.
    assert json.loads(response.body)["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert response.headers["X-Request-Id"]
    assert upstream.hits == 0


async def test_declared_length_at_the_limit_passes(
    counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    upstream, base = counter
    gateway = await start_gateway(limited(base))
    async with gateway.session.post(gateway.url + "/upload", data=b"y" * LIMIT) as response:
        assert response.status == 200
    assert upstream.bodies == [b"y" * LIMIT]


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def test_chunked_body_over_the_limit_is_413(
    counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    upstream, base = counter
    gateway = await start_gateway(limited(base))
    head = b"POST /upload HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
    response = await exchange(gateway, head + chunked([b"z" * 1000] * 10))
    assert response.status == 413
    # The route's mode (additive) applies to the gateway's own answers too.
    assert json.loads(response.body)["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert response.headers["Connection"] == "close"
    # The upstream may have seen the start of a request, but never a complete one.
    assert upstream.bodies == []


async def test_chunked_body_at_the_limit_passes(
    counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    upstream, base = counter
    gateway = await start_gateway(limited(base))
    head = (
        b"POST /upload HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n"
    )
    response = await exchange(gateway, head + chunked([b"z" * 1024] * 4))
    assert response.status == 200
    assert upstream.bodies == [b"z" * LIMIT]


async def test_stalled_request_body_is_408(
    counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    upstream, base = counter
    gateway = await start_gateway(limited(base, request_body_timeout_s=0.3))
    head = b"POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n"
    response = await exchange(gateway, head + b"only ten b", within=5)
    assert response.status == 408
    assert response.headers["Connection"] == "close"
    assert upstream.bodies == []


# --- malformed or oversized request heads ---------------------------------------------------

BAD_HEADS = {
    "long-header-value": (b"GET / HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"),
    "long-header-name": b"GET / HTTP/1.1\r\nHost: gw\r\n" + b"X" * 20_000 + b": v\r\n\r\n",
    "long-request-line": b"GET /" + b"p" * 20_000 + b" HTTP/1.1\r\nHost: gw\r\n\r\n",
    "too-many-headers": (
        b"GET / HTTP/1.1\r\nHost: gw\r\n"
        + b"".join(b"X-H%d: v\r\n" % i for i in range(200))
        + b"\r\n"
    ),
    "bad-request-line": b"GET\r\n\r\n",
    "space-before-colon": b"GET / HTTP/1.1\r\nHost : gw\r\n\r\n",
    "length-and-chunked": (
        b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n"
    ),
    "conflicting-lengths": (
        b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde"
    ),
    "bare-lf-in-chunk": (
        b"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n4\nabcd\n0\n\n"
    ),
    "nul-in-header": b"GET / HTTP/1.1\r\nHost: gw\r\nX-Nul: a\x00b\r\n\r\n",
}


@pytest.mark.parametrize("data", list(BAD_HEADS.values()), ids=list(BAD_HEADS))
async def test_malformed_or_oversized_request_is_4xx_and_never_forwarded(
    data: bytes, counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    upstream, base = counter
    gateway = await start_gateway(limited(base))
    response = await exchange(gateway, data)
    assert 400 <= response.status < 500
    assert upstream.hits == 0
    # The gateway survived it and serves the next request normally.
    async with gateway.session.get(gateway.url + "/after") as after:
        assert after.status == 200
    assert upstream.hits == 1


async def test_configured_header_limit_applies(
    counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    upstream, base = counter
    gateway = await start_gateway(limited(base, max_header_bytes=1024))
    ok = b"GET / HTTP/1.1\r\nHost: gw\r\nX-Fits: " + b"a" * 900 + b"\r\nConnection: close\r\n\r\n"
    assert (await exchange(gateway, ok)).status == 200
    too_big = b"GET / HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"a" * 1100 + b"\r\n\r\n"
    assert 400 <= (await exchange(gateway, too_big)).status < 500
    assert upstream.hits == 1


# --- client connection cap ------------------------------------------------------------------


async def _wait_for_connections(gateway: RunningGateway, count: int) -> None:
    server = gateway.server.runner.server
    assert server is not None
    for _ in range(500):
        if len(server.connections) == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(server.connections)} connections, expected {count}")


async def test_connections_over_the_cap_get_503(
    counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    upstream, base = counter
    gateway = await start_gateway({**route_config(base), "limits": {"max_client_connections": 2}})
    url = URL(gateway.url)
    idle = [await asyncio.open_connection(url.host, url.port) for _ in range(2)]
    try:
        await _wait_for_connections(gateway, 2)
        refused = await exchange(gateway, b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert refused.status == 503
        assert json.loads(refused.body)["error"]["code"] == "GATEWAY_OVERLOADED"
        assert refused.headers["Connection"] == "close"
        assert upstream.hits == 0
        # An idle connection is still a working one.
        reader, writer = idle[0]
        writer.write(b"GET /idle HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        async with asyncio.timeout(5):
            assert (await reader.read()).startswith(b"HTTP/1.1 200 ")
    finally:
        for _, writer in idle:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    # Once the idle connections are gone, new ones are served again.
    await _wait_for_connections(gateway, 0)
    again = await exchange(gateway, b"GET /again HTTP/1.1\r\nHost: gw\r\n\r\n")
    assert again.status == 200
    assert upstream.hits == 2


BURST_CAP, BURST = 50, 200


async def test_a_burst_of_connections_never_holds_more_than_the_cap(
    counter: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    """All at once, the burst lands in the listen backlog and is accepted in one turn of the
    event loop, before aiohttp has registered any of it: the cap counts connections as they
    are accepted (docs/security.md#limits-and-timeouts), so exactly `BURST_CAP` are held and
    every other one gets the 503 before anything is read."""
    upstream, base = counter
    limits = {"max_client_connections": BURST_CAP}
    gateway = await start_gateway({**route_config(base), "limits": limits})
    url = URL(gateway.url)
    assert url.host is not None and url.port is not None
    # Blocking connects, with no turn of the event loop in between: loopback completes each
    # handshake in the kernel, so all of them wait in the backlog together.
    sockets = [socket.create_connection((url.host, url.port), timeout=5) for _ in range(BURST)]
    streams = [await asyncio.open_connection(sock=sock) for sock in sockets]
    server = gateway.server.runner.server
    assert server is not None

    async def answered(reader: asyncio.StreamReader) -> bytes:
        return await reader.read(-1)  # a refused connection is answered and closed at once

    reads = [asyncio.ensure_future(answered(reader)) for reader, _ in streams]
    try:
        for _ in range(1000):  # until every connection is either refused or registered
            if sum(read.done() for read in reads) + len(server.connections) >= BURST:
                break
            await asyncio.sleep(0.01)
        refused = [r.result() for r in reads if r.done()]
        assert len(server.connections) == BURST_CAP
        assert len(refused) == BURST - BURST_CAP
        assert all(b" 503 " in raw.partition(b"\r\n")[0] for raw in refused)
        assert all(b"GATEWAY_OVERLOADED" in raw for raw in refused)
        # The held ones are working connections.
        held = next(i for i, read in enumerate(reads) if not read.done())
        reads[held].cancel()
        await asyncio.wait([reads[held]])
        reader, writer = streams[held]
        writer.write(b"GET /held HTTP/1.1\r\nHost: gw\r\n\r\n")
        async with asyncio.timeout(5):
            assert (await reader.readline()).startswith(b"HTTP/1.1 200 ")
        assert upstream.hits == 1
    finally:
        for read in reads:
            read.cancel()
        for _, writer in streams:
            writer.close()


# --- the pure-Python parser is refused ----------------------------------------------------

CONSTRUCT = textwrap.dedent(
    """
    import sys
    from gateway.serve.app import GatewayServer, UnsafeRuntime
    from gateway.config.loader import embedded_config

    try:
        GatewayServer(embedded_config("http://127.0.0.1:9"))
    except UnsafeRuntime as exc:
        print(f"refused: {exc}")
        sys.exit(3)
    print("constructed")
    """
)


def _python_without_c_parser(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIOHTTP_NO_EXTENSIONS": "1"}
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_gateway_server_refuses_the_pure_python_parser() -> None:
    # Without the variable the same construction succeeds: every other test here does it.
    result = _python_without_c_parser(["-c", CONSTRUCT])
    assert result.returncode == 3, result.stderr
    assert "refused:" in result.stdout
    assert "AIOHTTP_NO_EXTENSIONS" in result.stdout


def test_serve_exits_non_zero_with_a_clear_message_without_the_c_parser() -> None:
    args = ["-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9", "--listen"]
    result = _python_without_c_parser([*args, "127.0.0.1:0"])
    assert result.returncode != 0
    assert "AIOHTTP_NO_EXTENSIONS" in result.stderr
    assert "Traceback" not in result.stderr


# --- bounded memory while streaming -------------------------------------------------------

STREAM_CHUNK = b"\xa5" * (64 * 1024)
STREAM_CHUNKS = 512  # 32 MiB


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


async def generate(request: web.Request) -> web.StreamResponse:
    """Writes the same 64 KiB chunk over and over: the data is generated, never held."""
    count = int(request.query.get("chunks", STREAM_CHUNKS))
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    response.content_length = count * len(STREAM_CHUNK)
    await response.prepare(request)
    for _ in range(count):
        await response.write(STREAM_CHUNK)
    await response.write_eof()
    return response


@pytest.fixture
async def generator(start_upstream: StartUpstream) -> str:
    app = web.Application()
    app.router.add_get("/stream", generate)
    return await start_upstream(app)


async def _stream(gateway: RunningGateway, chunks: int, baseline: int) -> tuple[int, int]:
    """Read the body in chunks; returns (bytes received, peak RSS growth over `baseline`)."""
    received, peak = 0, 0
    async with gateway.session.get(gateway.url + f"/stream?chunks={chunks}") as response:
        assert response.status == 200
        async for chunk in response.content.iter_chunked(64 * 1024):
            received += len(chunk)
            peak = max(peak, rss_bytes() - baseline)
    return received, peak


@pytest.mark.slow
async def test_large_body_streams_in_bounded_memory(
    generator: str, start_gateway: StartGateway
) -> None:
    gateway = await start_gateway(route_config(generator))
    await _stream(gateway, 16, rss_bytes())  # warm up connections and buffers
    baseline = rss_bytes()
    received, peak = await _stream(gateway, STREAM_CHUNKS, baseline)
    assert received == STREAM_CHUNKS * len(STREAM_CHUNK)
    assert peak < 10 * 1024 * 1024, f"RSS grew by {peak / 2**20:.1f} MiB"


async def test_body_larger_than_the_request_limit_streams_as_a_response(
    generator: str, start_gateway: StartGateway
) -> None:
    """The request-body limit never applies to responses (a fast, small companion check)."""
    gateway = await start_gateway(limited(generator))
    received, _ = await _stream(gateway, 8, rss_bytes())
    assert received == 8 * len(STREAM_CHUNK)
