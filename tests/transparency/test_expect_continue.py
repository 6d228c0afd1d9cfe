"""`Expect: 100-continue`, direct and through the gateway, with curl as the client.

The upstream decides whether it wants the body. One that refuses after the head gets no body
at all, direct or through the gateway, and curl uploads nothing; one that agrees gets the
body after its 100 Continue, which curl sees either way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.curl import curl
from tests.support.gateway import StartGateway, StartRaw, StartUpstream, route_config

BODY_BYTES = 2_600_000
EXPECT = ("-H", "Expect: 100-continue")


@pytest.fixture
def upload(tmp_path: Path) -> str:
    path = tmp_path / "upload.bin"
    path.write_bytes(b"u" * BODY_BYTES)
    return f"@{path}"


async def test_an_upstream_that_refuses_after_the_head_gets_no_body(
    upload: str, start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    received: list[int] = []

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"expect: 100-continue" in head.lower()
        refusal = b'{"error":"quota exceeded"}'
        writer.write(
            b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(refusal), refusal)
        )
        await writer.drain()
        got = 0
        try:  # whatever arrives after the head within half a second is an upload
            async with asyncio.timeout(0.5):
                while chunk := await reader.read(65536):
                    got += len(chunk)
        except TimeoutError:
            pass
        received.append(got)

    upstream = await start_raw(refuse)
    gateway = await start_gateway(route_config(upstream.url, mode="original"))
    direct = await curl(upstream.url + "/upload", *EXPECT, "--data-binary", upload)
    proxied = await curl(gateway.url + "/upload", *EXPECT, "--data-binary", upload)
    assert (direct.status, direct.body) == (413, b'{"error":"quota exceeded"}')
    assert (proxied.status, proxied.body) == (direct.status, direct.body)
    assert direct.uploaded == proxied.uploaded == 0
    assert received == [0, 0]


async def test_an_upstream_that_agrees_gets_the_body_after_its_100(
    upload: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    async def store(request: web.Request) -> web.Response:
        return web.json_response({"stored": len(await request.read())})

    app = web.Application(client_max_size=BODY_BYTES * 2)
    app.router.add_post("/upload", store)  # aiohttp answers 100 Continue itself, then reads
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream))
    direct = await curl(upstream + "/upload", *EXPECT, "--data-binary", upload)
    proxied = await curl(gateway.url + "/upload", *EXPECT, "--data-binary", upload)
    assert (direct.status, direct.body) == (200, b'{"stored": %d}' % BODY_BYTES)
    assert (proxied.status, proxied.body) == (direct.status, direct.body)
    assert direct.uploaded == proxied.uploaded == BODY_BYTES
    assert [head.split("\r\n")[0] for head in proxied.heads] == [
        head.split("\r\n")[0] for head in direct.heads
    ]
    assert proxied.heads[0] == "HTTP/1.1 100 Continue"


async def test_a_request_the_gateway_refuses_itself_is_not_uploaded(
    upload: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """Over limits.max_request_body_bytes: 413 from the gateway, and curl sends nothing."""
    upstream = await start_upstream(web.Application())
    config = route_config(upstream) | {"limits": {"max_request_body_bytes": 1_000_000}}
    gateway = await start_gateway(config)
    proxied = await curl(gateway.url + "/upload", *EXPECT, "--data-binary", upload)
    assert proxied.status == 413
    assert proxied.uploaded == 0
