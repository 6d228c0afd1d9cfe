"""Header hygiene (docs/transparency.md): hop-by-hop and forwarding headers, Host, Via; no more.

The client side writes raw requests over a socket so that exactly the headers under test are
sent, with nothing added by an HTTP client library; the upstream records what arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDictProxy
from yarl import URL

from gateway.exchange.headers import visible_ascii
from tests.support.gateway import (
    RawResponse,
    StartGateway,
    StartUpstream,
    exchange_raw,
    route_config,
)

HOP_BY_HOP_REQUEST = (
    ("Keep-Alive", "timeout=5"),
    ("TE", "trailers"),
    ("Trailer", "X-Checksum"),
    ("Upgrade", "websocket"),
    ("Proxy-Authorization", "Basic c2VjcmV0"),
    ("Proxy-Connection", "keep-alive"),
    ("X-Secret", "named in Connection"),
    ("X-Third", "named in a second Connection header"),
)
HOP_BY_HOP_RESPONSE = (
    ("Keep-Alive", "timeout=5, max=100"),
    ("Trailer", "X-Checksum"),
    ("Upgrade", "h2c"),
    ("Proxy-Authenticate", 'Basic realm="x"'),
    ("Proxy-Connection", "keep-alive"),
    ("X-Secret", "named in Connection"),
    ("X-Third", "named in a second Connection header"),
)
GATEWAY_ADDED = {"host", "x-forwarded-for", "x-forwarded-proto", "forwarded", "via", "x-request-id"}


async def raw_request(base_url: str, head: str, body: bytes = b"") -> RawResponse:
    """Send a hand-written request (CRLFs added, `Connection: close` expected in it)."""
    data = head.strip().replace("\n", "\r\n").encode("latin-1") + b"\r\n\r\n" + body
    return await exchange_raw(base_url, data)


@dataclass
class Recorder:
    """Records each request's headers; `/login` sets cookies, everything else answers ok."""

    seen: list[CIMultiDictProxy[str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers)
        self.bodies.append(await request.read())
        response = web.Response(text="ok", headers={"Via": "1.1 upstream-cache"})
        if request.path == "/login":
            response.headers.add("Set-Cookie", "sid=abc123; Path=/; HttpOnly")
            response.headers.add("Set-Cookie", "theme=dark; Path=/")
        return response

    @property
    def last(self) -> CIMultiDictProxy[str]:
        return self.seen[-1]


@pytest.fixture
async def recorder(start_upstream: StartUpstream) -> tuple[Recorder, str]:
    rec = Recorder()
    return rec, await start_upstream(rec.app())


# --- hop-by-hop, both ways ------------------------------------------------------------------


async def test_request_hop_by_hop_headers_are_not_forwarded(
    recorder: tuple[Recorder, str], start_gateway: StartGateway
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base))
    lines = "\n".join(f"{name}: {value}" for name, value in HOP_BY_HOP_REQUEST)
    head = f"""GET /echo HTTP/1.1
Host: gw.example
Connection: close, X-Secret
Connection: X-Third
{lines}
Authorization: Bearer end-to-end
X-Kept: yes"""
    response = await raw_request(gateway.url, head)
    assert response.status == 200
    seen = rec.last
    leaked = [name for name, _ in HOP_BY_HOP_REQUEST if name in seen]
    assert leaked == []
    for value in seen.getall("Connection", []):
        assert "secret" not in value.lower()
        assert "third" not in value.lower()
    assert seen["X-Kept"] == "yes"
    assert seen["Authorization"] == "Bearer end-to-end"


@pytest.fixture
async def start_raw() -> AsyncIterator[Callable[[bytes], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(response: bytes) -> str:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n\r\n")
                writer.write(response)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


RESPONSE_PATHS = {
    "success-relayed": (200, "additive"),
    "failure-headers-mode": (404, "headers"),
    "failure-additive-rewritten": (404, "additive"),
    "failure-envelope-rewritten": (404, "envelope"),
}


@pytest.mark.parametrize(
    ("status", "mode"), list(RESPONSE_PATHS.values()), ids=list(RESPONSE_PATHS)
)
async def test_response_hop_by_hop_headers_are_not_returned(
    status: int,
    mode: str,
    start_raw: Callable[[bytes], Awaitable[str]],
    start_gateway: StartGateway,
) -> None:
    body = b'{"message":"m"}'
    lines = "".join(f"{name}: {value}\r\n" for name, value in HOP_BY_HOP_RESPONSE)
    response = (
        f"HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive, X-Secret\r\n"
        f"Connection: X-Third\r\n{lines}X-Kept: yes\r\n\r\n"
    ).encode() + body
    upstream = await start_raw(response)
    gateway = await start_gateway(route_config(upstream, mode=mode))
    async with gateway.session.get(gateway.url + "/x") as reply:
        assert reply.status == status
        headers = reply.headers
        await reply.read()
    leaked = [name for name, _ in HOP_BY_HOP_RESPONSE if name in headers]
    assert leaked == []
    for value in headers.getall("Connection", []):
        assert "secret" not in value.lower()
        assert "third" not in value.lower()
    assert headers["X-Kept"] == "yes"
    assert headers.getall("Via") == ["1.1 mendpoint"]


# --- forwarding headers ---------------------------------------------------------------------

XFF = {
    "none-sent": ([], "127.0.0.1"),
    "one-sent": (["203.0.113.9"], "203.0.113.9, 127.0.0.1"),
    "list-sent": (["203.0.113.9, 198.51.100.2"], "203.0.113.9, 198.51.100.2, 127.0.0.1"),
    "two-lines-sent": (["203.0.113.9", "198.51.100.2"], "203.0.113.9, 198.51.100.2, 127.0.0.1"),
}


@pytest.mark.parametrize(("sent", "expected"), list(XFF.values()), ids=list(XFF))
async def test_x_forwarded_for_is_appended_to(
    sent: list[str],
    expected: str,
    recorder: tuple[Recorder, str],
    start_gateway: StartGateway,
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base))
    lines = "".join(f"\nX-Forwarded-For: {value}" for value in sent)
    response = await raw_request(
        gateway.url, f"GET / HTTP/1.1\nHost: gw.example\nConnection: close{lines}"
    )
    assert response.status == 200
    assert rec.last.getall("X-Forwarded-For") == [expected]


async def test_client_forwarding_claims_are_overwritten(
    recorder: tuple[Recorder, str], start_gateway: StartGateway
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base))
    head = """GET / HTTP/1.1
Host: api.example.com
X-Forwarded-Host: evil.example
X-Forwarded-Host: evil2.example
X-Forwarded-Proto: https
Forwarded: for=6.6.6.6;host=evil.example;proto=https
Connection: close"""
    assert (await raw_request(gateway.url, head)).status == 200
    seen = rec.last
    assert seen.getall("X-Forwarded-Host") == ["api.example.com"]
    assert seen.getall("X-Forwarded-Proto") == ["http"]
    assert seen.getall("Forwarded") == ['for=127.0.0.1;host="api.example.com";proto=http']
    assert seen.getall("X-Forwarded-For") == ["127.0.0.1"]


async def test_via_is_added_both_ways(
    recorder: tuple[Recorder, str], start_gateway: StartGateway
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base))
    head = "GET / HTTP/1.1\nHost: gw\nVia: 1.0 corp-proxy\nConnection: close"
    response = await raw_request(gateway.url, head)
    assert rec.last.getall("Via") == ["1.0 corp-proxy", "1.1 mendpoint"]
    assert response.headers.getall("Via") == ["1.1 upstream-cache", "1.1 mendpoint"]


# --- Host -----------------------------------------------------------------------------------

HOSTS = {
    "rewritten": (False, "api.example.com", None),
    "preserved": (True, "api.example.com", "api.example.com"),
    "preserved-with-port": (True, "api.example.com:8443", "api.example.com:8443"),
}


@pytest.mark.parametrize(("preserve", "sent", "expected"), list(HOSTS.values()), ids=list(HOSTS))
async def test_host_is_rewritten_to_the_upstream_unless_preserved(
    preserve: bool,
    sent: str,
    expected: str | None,
    recorder: tuple[Recorder, str],
    start_gateway: StartGateway,
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base, preserve_host=preserve))
    head = f"GET / HTTP/1.1\nHost: {sent}\nConnection: close"
    assert (await raw_request(gateway.url, head)).status == 200
    assert rec.last.getall("Host") == [expected or URL(base).raw_authority]
    assert rec.last.getall("X-Forwarded-Host") == [sent]


async def test_http10_request_without_host_gets_the_upstream_host(
    recorder: tuple[Recorder, str], start_gateway: StartGateway
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base, preserve_host=True))
    response = await raw_request(gateway.url, "GET /old HTTP/1.0")
    assert response.status == 200
    assert rec.last.getall("Host") == [URL(base).raw_authority]
    assert "X-Forwarded-Host" not in rec.last


# --- nothing added that the client did not send ----------------------------------------------


@pytest.mark.parametrize(
    ("method", "body"), [("GET", b""), ("POST", b"raw bytes")], ids=["get", "post"]
)
async def test_gateway_adds_no_client_headers_of_its_own(
    method: str, body: bytes, recorder: tuple[Recorder, str], start_gateway: StartGateway
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base))
    length = f"\nContent-Length: {len(body)}" if body else ""
    head = f"{method} /bare HTTP/1.1\nHost: gw{length}\nConnection: close"
    assert (await raw_request(gateway.url, head, body)).status == 200
    seen = rec.last
    for name in ("User-Agent", "Accept", "Accept-Encoding", "Content-Type", "Cookie"):
        assert name not in seen
    allowed = GATEWAY_ADDED | {"x-forwarded-host"} | ({"content-length"} if body else set())
    assert {k.lower() for k in seen} <= allowed
    assert rec.bodies[-1] == body


async def test_client_content_headers_pass_unchanged(
    recorder: tuple[Recorder, str], start_gateway: StartGateway
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base))
    head = """GET / HTTP/1.1
Host: gw
User-Agent: agent/1.0 (tests)
Accept: application/vnd.example+json; q=0.9
Accept-Encoding: br
Accept-Language: fr-CH
Cookie: a=1; b=2
Connection: close"""
    assert (await raw_request(gateway.url, head)).status == 200
    seen = rec.last
    assert seen.getall("User-Agent") == ["agent/1.0 (tests)"]
    assert seen.getall("Accept") == ["application/vnd.example+json; q=0.9"]
    assert seen.getall("Accept-Encoding") == ["br"]
    assert seen.getall("Accept-Language") == ["fr-CH"]
    assert seen.getall("Cookie") == ["a=1; b=2"]


# --- no cookie jar ---------------------------------------------------------------------------


async def test_cookies_are_passed_on_and_never_stored(
    recorder: tuple[Recorder, str], start_gateway: StartGateway
) -> None:
    rec, base = recorder
    gateway = await start_gateway(route_config(base))
    login = await raw_request(gateway.url, "GET /login HTTP/1.1\nHost: gw\nConnection: close")
    assert login.headers.getall("Set-Cookie") == [
        "sid=abc123; Path=/; HttpOnly",
        "theme=dark; Path=/",
    ]
    for _ in range(2):
        await raw_request(gateway.url, "GET /after HTTP/1.1\nHost: gw\nConnection: close")
        assert "Cookie" not in rec.last


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x3000), max_size=40))
def test_visible_ascii_is_exactly_0x21_to_0x7e(value: str) -> None:
    """Request and session ids are accepted only when every character is visible ASCII."""
    assert visible_ascii(value) == all(0x21 <= ord(c) <= 0x7E for c in value)
