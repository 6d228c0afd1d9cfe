"""WebSocket tunnels, direct and through the gateway, with the `websockets` client.

An aiohttp WebSocket server upstream; the same conversation (text and binary echo, ping/pong,
a 1 MiB frame, a close from either side) runs against it directly and through the gateway,
and what the client sees must be the same. A refused handshake is the upstream's answer,
classified like any failure and never blamed on the client; a silent tunnel is closed after
`limits.tunnel_idle_timeout_s` (docs/transparency.md).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import WSMsgType, web
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.telemetry.metrics import REGISTRY
from tests.support.gateway import StartGateway, StartUpstream, route_config
from tests.support.tls import tls_upstream, write_pem

BIG = bytes(range(256)) * 4096  # 1 MiB, every byte value
HANDSHAKES = web.AppKey("handshakes", list[str])  # the Upgrade each /refused request carried


async def echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(protocols=("chat",))
    await ws.prepare(request)
    async for message in ws:
        if message.type == WSMsgType.TEXT and message.data == "close please":
            await ws.close(code=4001, message=b"asked to")
        elif message.type == WSMsgType.TEXT:
            await ws.send_str("echo:" + message.data)
        elif message.type == WSMsgType.BINARY:
            await ws.send_bytes(message.data[::-1])
    return ws


async def refuse(request: web.Request) -> web.Response:
    """A feed that refuses this client; a request without the handshake is a 400, as an
    aiohttp WebSocket endpoint answers one (what the gateway got before it forwarded it)."""
    request.app[HANDSHAKES].append(request.headers.get("Upgrade", ""))
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return web.json_response({"error": "expected a WebSocket handshake"}, status=400)
    return web.json_response({"error": "not allowed to watch this feed"}, status=403)


def upstream_app() -> web.Application:
    app = web.Application()
    app[HANDSHAKES] = []
    app.router.add_get("/ws", echo)
    app.router.add_get("/refused", refuse)
    return app


async def conversation(base: str, tls: ssl.SSLContext | None = None) -> list[Any]:
    """What a client sees over one tunnel: echoes, a pong, a big frame, its own close."""
    seen: list[Any] = []
    async with connect(
        base + "/ws",
        subprotocols=["chat"],  # type: ignore[list-item]
        max_size=None,
        ssl=tls,
    ) as ws:
        seen.append(ws.subprotocol)
        await ws.send("héllo")
        seen.append(await ws.recv())
        await ws.send(b"\x00\x01\x02binary")
        seen.append(await ws.recv())
        pong = await ws.ping(b"are you there")
        seen.append(await asyncio.wait_for(pong, 5) >= 0)
        await ws.send(BIG)
        seen.append((await ws.recv()) == BIG[::-1])
        for n in range(20):  # many small frames, in order
            await ws.send(f"m{n}")
        seen.append([await ws.recv() for _ in range(20)])
        await ws.close(code=1000, reason="bye")
        seen.append((ws.close_code, ws.close_reason))
    return seen


async def server_close(base: str) -> tuple[int | None, str | None]:
    async with connect(base + "/ws") as ws:
        await ws.send("close please")
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
    received = closed.value.rcvd
    assert received is not None
    return received.code, received.reason


def ws_url(http_url: str) -> str:
    return "ws://" + http_url.removeprefix("http://")


def tunnels(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, {"route": "api", **labels}) or 0.0


async def test_a_conversation_is_the_same_direct_and_through_the_gateway(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(upstream_app())
    gateway = await start_gateway(route_config(upstream))
    opened = tunnels("mendpoint_tunnels_opened_total")
    direct = await conversation(ws_url(upstream))
    proxied = await conversation(ws_url(gateway.url))
    assert direct[0] == "chat"
    assert direct[1:3] == ["echo:héllo", b"yranib\x02\x01\x00"]
    assert direct[-1] == (1000, "")  # aiohttp answers a close with its code only
    assert proxied == direct
    assert tunnels("mendpoint_tunnels_opened_total") == opened + 1


async def test_a_tunnel_to_a_wss_upstream_is_the_same_conversation(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    """A `https://` upstream behind a route with `tls.ca_file`: the gateway's side of the tunnel
    is TLS, the client's is plain `ws://`, and the conversation is the one a `wss://` client
    that trusts the same CA has directly."""
    ca = trustme.CA()
    trust = ssl.create_default_context(cafile=write_pem(tmp_path, "ca.pem", ca.cert_pem))
    async with tls_upstream(ca.issue_cert("127.0.0.1"), app=upstream_app()) as url:
        direct = await conversation("wss://" + url.removeprefix("https://"), tls=trust)
        gateway = await start_gateway(
            route_config(url, tls={"ca_file": write_pem(tmp_path, "ca2.pem", ca.cert_pem)})
        )
        proxied = await conversation(ws_url(gateway.url))
    assert direct[1] == "echo:héllo"
    assert proxied == direct


async def test_a_close_from_the_upstream_reaches_the_client(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(upstream_app())
    gateway = await start_gateway(route_config(upstream))
    closed = tunnels("mendpoint_tunnels_closed_total", reason="upstream_closed")
    direct = await server_close(ws_url(upstream))
    assert direct == (4001, "asked to")
    assert await server_close(ws_url(gateway.url)) == direct
    for _ in range(50):  # the gateway counts once its side of the tunnel has ended
        if tunnels("mendpoint_tunnels_closed_total", reason="upstream_closed") > closed:
            break
        await asyncio.sleep(0.05)
    assert tunnels("mendpoint_tunnels_closed_total", reason="upstream_closed") == closed + 1


async def test_a_refused_handshake_is_classified_not_blamed_on_the_client(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    app = upstream_app()
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream))
    with pytest.raises(InvalidStatus) as direct:
        async with connect(ws_url(upstream) + "/refused"):
            pass
    with pytest.raises(InvalidStatus) as proxied:
        async with connect(ws_url(gateway.url) + "/refused"):
            pass
    assert direct.value.response.status_code == 403
    assert proxied.value.response.status_code == 403
    assert app[HANDSHAKES] == ["websocket", "websocket"]  # the gateway forwarded the handshake
    body = json.loads(proxied.value.response.body or b"{}")
    text = json.dumps(body)
    assert "BAD_REQUEST" not in text
    assert "not allowed to watch this feed" in text  # the upstream's own answer, classified


async def test_other_upgrades_are_still_answered_over_http(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(upstream_app())
    gateway = await start_gateway(route_config(upstream))
    response = await gateway.request(
        "GET", "/ws", headers={"Connection": "Upgrade", "Upgrade": "h2c"}
    )
    assert response.status != 101
    assert response.headers["Connection"] == "close"


async def test_a_silent_tunnel_is_closed_after_the_idle_timeout(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(upstream_app())
    config = route_config(upstream)
    config["limits"] = {"tunnel_idle_timeout_s": 0.5}
    gateway = await start_gateway(config)
    idle = tunnels("mendpoint_tunnels_closed_total", reason="idle_timeout")
    async with connect(ws_url(gateway.url) + "/ws", ping_interval=None) as ws:
        await ws.send("still here")
        assert await ws.recv() == "echo:still here"
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        waited = loop.time() - quiet_since
    assert 0.3 < waited < 5
    assert tunnels("mendpoint_tunnels_closed_total", reason="idle_timeout") == idle + 1


async def test_a_quiet_tunnel_outlives_the_http_timeouts(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """After the 101 only `tunnel_idle_timeout_s` applies: the per-read, response, total and
    keep-alive timeouts are for HTTP exchanges and would cut every quiet WebSocket."""
    upstream = await start_upstream(upstream_app())
    config = route_config(upstream)
    short = 0.3
    config["limits"] = {
        "read_timeout_s": short,
        "response_timeout_s": short,
        "total_timeout_s": short,
        "keepalive_timeout_s": short,
        "tunnel_idle_timeout_s": 30,
    }
    gateway = await start_gateway(config)
    async with connect(ws_url(gateway.url) + "/ws", ping_interval=None) as ws:
        await ws.send("before")
        assert await ws.recv() == "echo:before"
        await asyncio.sleep(short * 4)
        await ws.send("after")
        assert await asyncio.wait_for(ws.recv(), 5) == "echo:after"
