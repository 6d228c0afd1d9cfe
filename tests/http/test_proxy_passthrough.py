"""Successes pass through untouched: status, headers, body bytes, paths and request bodies.

Every test runs a real aiohttp upstream that records what it received, and a real gateway
in front of it on 127.0.0.1. Where exact bytes matter (raw paths, absolute-form targets) the
client writes the request line itself over a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDictProxy
from yarl import URL

from tests.support.gateway import (
    RawResponse,
    StartGateway,
    StartUpstream,
    exchange_raw,
    route_config,
)

MODES = ("original", "headers", "additive", "envelope")
IGNORED_IN_COMPARISON = frozenset({"date", "via", "x-request-id"})


@dataclass(frozen=True)
class Seen:
    """One request as the upstream received it."""

    method: str
    raw_path: str
    headers: CIMultiDictProxy[str]
    body: bytes


@dataclass(frozen=True)
class Canned:
    """A response the upstream sends verbatim."""

    status: int
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Upstream:
    """A recording upstream: every request is logged (with its whole body) before it is answered."""

    seen: list[Seen] = field(default_factory=list)

    def app(self) -> web.Application:
        @web.middleware
        async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
            body = await request.read()
            self.seen.append(Seen(request.method, request.raw_path, request.headers, body))
            return await handler(request)

        app = web.Application(middlewares=[record])
        app.router.add_route("*", "/canned/{name}", canned)
        app.router.add_route("*", "/status/{code}", status)
        app.router.add_get("/chunked", chunked)
        app.router.add_get("/binary", binary)
        app.router.add_get("/gzip", gzipped)
        app.router.add_route("*", "/{tail:.*}", echo)
        return app

    def paths(self) -> list[str]:
        return [s.raw_path for s in self.seen]


CANNED: dict[str, Canned] = {
    "200": Canned(
        200,
        {
            "Content-Type": "application/json",
            "ETag": '"v1"',
            "Cache-Control": "max-age=60",
            "X-Custom": "kept as is",
        },
        b'{"ok": true, "items": [1, 2, 3]}',
    ),
    "201": Canned(
        201,
        {"Content-Type": "application/json; charset=utf-8", "Location": "/v1/items/9"},
        b'{"id":9}',
    ),
    "204": Canned(204, {"X-Custom": "no content"}),
    "301": Canned(301, {"Location": "/landed", "Content-Type": "text/plain"}, b"moved"),
    "304": Canned(304, {"ETag": '"v1"', "Cache-Control": "max-age=60"}),
}

BINARY = bytes(range(256)) * 257 + b"\r\n\r\n\x00\xff"
GZIPPED = gzip.compress(b"hello " * 1000)
CHUNKS = [b"first chunk;", b"", b"\x00\x01\x02", b"second,", b"x" * 5000, b"last"]


async def canned(request: web.Request) -> web.Response:
    spec = CANNED[request.match_info["name"]]
    return web.Response(status=spec.status, headers=spec.headers, body=spec.body or None)


async def status(request: web.Request) -> web.Response:
    code = int(request.match_info["code"])
    return web.json_response({"message": f"status {code}", "detail": "x"}, status=code)


async def chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    for chunk in CHUNKS:
        await response.write(chunk)
        await asyncio.sleep(0.005)
    await response.write_eof()
    return response


async def binary(request: web.Request) -> web.Response:
    return web.Response(body=BINARY, content_type="application/octet-stream")


async def gzipped(request: web.Request) -> web.Response:
    return web.Response(
        body=GZIPPED, headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"}
    )


async def echo(request: web.Request) -> web.Response:
    return web.Response(text="echo", headers={"Content-Type": "text/plain"})


async def raw_request(base_url: str, data: bytes) -> RawResponse:
    return await exchange_raw(base_url, data)


def comparable(headers: CIMultiDictProxy[str]) -> list[tuple[str, str]]:
    return sorted(
        (k.lower(), v) for k, v in headers.items() if k.lower() not in IGNORED_IN_COMPARISON
    )


@pytest.fixture
async def upstream(start_upstream: StartUpstream) -> AsyncIterator[tuple[Upstream, str]]:
    recorder = Upstream()
    url = await start_upstream(recorder.app())
    yield recorder, url


# --- status, headers and body bytes ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CANNED), ids=[f"status-{n}" for n in sorted(CANNED)])
async def test_success_statuses_pass_through_unchanged(
    name: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    spec = CANNED[name]
    async with gateway.session.get(base + f"/canned/{name}", allow_redirects=False) as direct:
        direct_body = await direct.read()
        direct_headers = comparable(direct.headers)
    async with gateway.session.get(
        gateway.url + f"/canned/{name}", allow_redirects=False
    ) as through:
        body = await through.read()
        assert through.status == spec.status
        assert comparable(through.headers) == direct_headers
        for key, value in spec.headers.items():
            assert through.headers[key] == value
        assert through.headers.getall("Via")[-1] == "1.1 mendpoint"
        assert "X-Error-Code" not in through.headers
    assert body == direct_body == spec.body
    # One hit for the direct fetch, one through the gateway; a followed redirect would add /landed.
    assert recorder.paths() == [f"/canned/{name}"] * 2


async def test_head_passes_headers_without_a_body(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    async with gateway.session.head(base + "/binary") as direct:
        expected = comparable(direct.headers)
    async with gateway.session.request("HEAD", gateway.url + "/binary") as response:
        assert response.status == 200
        assert response.headers["Content-Length"] == str(len(BINARY))
        assert comparable(response.headers) == expected
        assert await response.read() == b""
    assert [s.method for s in recorder.seen] == ["HEAD", "HEAD"]


async def test_chunked_upstream_body_is_relayed_whole(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base))
    async with gateway.session.request("GET", gateway.url + "/chunked") as response:
        assert response.status == 200
        assert "Content-Length" not in response.headers
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert await response.read() == b"".join(CHUNKS)


async def test_binary_body_is_byte_identical(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base))
    async with gateway.session.request("GET", gateway.url + "/binary") as response:
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert response.headers["Content-Length"] == str(len(BINARY))
        assert await response.read() == BINARY


# --- request targets ---------------------------------------------------------------------

TARGETS = {
    # Dot segments are resolved, and refused where they hide behind %2F: see
    # tests/exchange/test_path_routes.py (docs/transparency.md#paths).
    "encoded-slash-in-a-segment": "/group%2Fproject/a%20b?x=%20y&p=..%2F..",
    "double-slash-authority-lookalike": "//evil.example/a",
    "odd-query": "/q?a=1&a=2&b=%zz&c=%2B+&=&",
    "percent-case-kept": "/caf%c3%A9?q=%2f",
}


@pytest.mark.parametrize("target", list(TARGETS.values()), ids=list(TARGETS))
async def test_request_target_reaches_upstream_byte_identical(
    target: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    request = f"GET {target} HTTP/1.1\r\nHost: gw.example\r\nConnection: close\r\n\r\n"
    response = await raw_request(gateway.url, request.encode())
    assert response.status == 200
    assert response.body == b"echo"
    assert recorder.paths() == [target]


ABSOLUTE_FORM = {
    "path": ("http://evil.example/x", "/x"),
    "path-and-query": ("http://evil.example:8443/x/y?q=1&r=%20", "/x/y?q=1&r=%20"),
    "https-authority": ("https://evil.example/", "/"),
}


@pytest.mark.parametrize(
    ("target", "expected"), list(ABSOLUTE_FORM.values()), ids=list(ABSOLUTE_FORM)
)
async def test_absolute_form_target_reaches_only_the_configured_upstream(
    target: str,
    expected: str,
    upstream: tuple[Upstream, str],
    start_gateway: StartGateway,
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    request = f"GET {target} HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
    response = await raw_request(gateway.url, request.encode())
    assert response.status == 200
    assert recorder.paths() == [expected]
    assert recorder.seen[0].headers["Host"] == URL(base).raw_authority


# --- request bodies ----------------------------------------------------------------------

REQUEST_BODY = bytes(range(256)) * 300


async def _generate(parts: int) -> AsyncIterator[bytes]:
    size = len(REQUEST_BODY) // parts + 1
    for start in range(0, len(REQUEST_BODY), size):
        yield REQUEST_BODY[start : start + size]
        await asyncio.sleep(0)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
async def test_request_body_arrives_intact(
    framing: str, method: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    data: bytes | AsyncIterator[bytes] = (
        REQUEST_BODY if framing == "content-length" else _generate(7)
    )
    headers = {"Content-Type": "application/octet-stream"}
    async with gateway.session.request(
        method, gateway.url + "/upload", data=data, headers=headers
    ) as response:
        assert response.status == 200
    [seen] = recorder.seen
    assert seen.method == method
    assert seen.body == REQUEST_BODY
    assert seen.headers["Content-Type"] == "application/octet-stream"
    if framing == "content-length":
        assert seen.headers["Content-Length"] == str(len(REQUEST_BODY))


async def test_request_without_body_sends_no_body(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    async with gateway.session.request("GET", gateway.url + "/nobody") as response:
        assert response.status == 200
    [seen] = recorder.seen
    assert seen.body == b""
    assert "Transfer-Encoding" not in seen.headers
    assert seen.headers.get("Content-Length", "0") == "0"


# --- exactly one upstream request per client request -------------------------------------

EXCHANGES = {
    "get-200": ("GET", 200),
    "get-404": ("GET", 404),
    "get-503": ("GET", 503),
    "post-500": ("POST", 500),
    "post-429": ("POST", 429),
}


@pytest.mark.parametrize(("method", "code"), list(EXCHANGES.values()), ids=list(EXCHANGES))
async def test_exactly_one_upstream_request_per_client_request(
    method: str,
    code: int,
    upstream: tuple[Upstream, str],
    start_gateway: StartGateway,
) -> None:
    """In every mode (asked for per request), each client request is one upstream request."""
    recorder, base = upstream
    gateway = await start_gateway(route_config(base, mode="original"))
    url = gateway.url + f"/status/{code}"
    for mode in MODES:
        for _ in range(2):
            before = len(recorder.seen)
            headers = {"X-Error-Format": mode}
            async with gateway.session.request(
                method, url, data=b"payload", headers=headers
            ) as response:
                assert response.status == code
                assert ("X-Error-Code" in response.headers) is (code >= 400 and mode != "original")
                await response.read()
            assert len(recorder.seen) == before + 1, mode
    assert len(recorder.seen) == 2 * len(MODES)
    assert {(s.method, s.raw_path, s.body) for s in recorder.seen} == {
        (method, f"/status/{code}", b"payload")
    }


# --- X-Request-Id ------------------------------------------------------------------------

GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")


@pytest.mark.parametrize("path", ["/ok", "/status/404"], ids=["success", "failure"])
async def test_request_id_is_echoed_and_forwarded(
    path: str, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base, mode="envelope"))
    async with gateway.session.request(
        "GET", gateway.url + path, headers={"X-Request-Id": "req-abc.123"}
    ) as response:
        assert response.headers.getall("X-Request-Id") == ["req-abc.123"]
        if response.status == 404:
            assert (await response.json())["error"]["request_id"] == "req-abc.123"
    assert recorder.seen[0].headers.getall("X-Request-Id") == ["req-abc.123"]


INVALID_IDS = {
    "absent": None,
    "empty": "",
    "with-space": "has space",
    "too-long": "x" * 201,
    "non-ascii": "idé",
}


@pytest.mark.parametrize("sent", list(INVALID_IDS.values()), ids=list(INVALID_IDS))
async def test_request_id_is_generated_when_absent_or_unusable(
    sent: str | None, upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    headers = {} if sent is None else {"X-Request-Id": sent}
    ids: list[str] = []
    for _ in range(2):
        async with gateway.session.request("GET", gateway.url + "/ok", headers=headers) as response:
            ids.append(response.headers["X-Request-Id"])
    assert all(GENERATED_ID.match(i) for i in ids)
    assert ids[0] != ids[1]
    assert [s.headers.getall("X-Request-Id") for s in recorder.seen] == [[i] for i in ids]


async def test_duplicate_request_id_headers_collapse_to_one(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    request = (
        b"GET /ok HTTP/1.1\r\nHost: gw\r\nX-Request-Id: first\r\nX-Request-Id: second\r\n"
        b"Connection: close\r\n\r\n"
    )
    response = await raw_request(gateway.url, request)
    assert response.headers.getall("X-Request-Id") == ["first"]
    assert recorder.seen[0].headers.getall("X-Request-Id") == ["first"]


async def test_keepalive_connection_carries_many_requests(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    """Sequential and concurrent requests on pooled connections each get their own answer."""
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))

    async def one(i: int) -> tuple[int, bytes]:
        async with gateway.session.request(
            "GET", gateway.url + f"/status/{200 + (i % 2) * 204}"
        ) as response:
            return response.status, await response.read()

    results = await asyncio.gather(*(one(i) for i in range(20)))
    for i, (code, body) in enumerate(results):
        expected = 200 + (i % 2) * 204
        assert code == expected
        if expected == 200:
            assert json.loads(body) == {"message": "status 200", "detail": "x"}
        else:
            assert json.loads(body)["message"] == "status 404"
    assert len(recorder.seen) == 20


async def test_encoded_success_body_is_not_decompressed(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(route_config(base))
    async with gateway.session.request(
        "GET", gateway.url + "/gzip", headers={"Accept-Encoding": "gzip"}
    ) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["Content-Length"] == str(len(GZIPPED))
        assert await response.read() == GZIPPED


async def test_pipelined_requests_get_their_own_responses_in_order(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    pipelined = (
        b"GET /canned/201 HTTP/1.1\r\nHost: gw\r\n\r\n"
        b"GET /status/404 HTTP/1.1\r\nHost: gw\r\n\r\n"
        b"GET /binary HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
    )
    url = URL(gateway.url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(pipelined)
        bodies: list[tuple[int, bytes]] = []
        async with asyncio.timeout(10):
            for _ in range(3):
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                bodies.append((status, await reader.readexactly(length)))
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    assert [code for code, _ in bodies] == [201, 404, 200]
    assert bodies[0][1] == CANNED["201"].body
    assert json.loads(bodies[1][1])["error"]["code"] == "NOT_FOUND"
    assert bodies[2][1] == BINARY
    assert recorder.paths() == ["/canned/201", "/status/404", "/binary"]


async def test_expect_100_continue_body_arrives(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    gateway = await start_gateway(route_config(base))
    async with gateway.session.put(
        gateway.url + "/upload", data=REQUEST_BODY, expect100=True
    ) as response:
        assert response.status == 200
    assert [s.body for s in recorder.seen] == [REQUEST_BODY]


async def test_routes_match_on_segment_boundaries(
    upstream: tuple[Upstream, str], start_gateway: StartGateway
) -> None:
    recorder, base = upstream
    config = {"routes": [{"name": "api", "prefix": "/api", "upstream": base}]}
    gateway = await start_gateway(config)
    for path, expected in [("/api", 200), ("/api/x?y=1", 200), ("/apix", 404), ("/", 404)]:
        async with gateway.session.get(gateway.url + path) as response:
            assert response.status == expected, path
            assert response.headers["X-Request-Id"]
    assert recorder.paths() == ["/api", "/api/x?y=1"]


async def test_missing_content_type_is_not_invented(start_gateway: StartGateway) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbytes")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        gateway = await start_gateway(route_config(f"http://127.0.0.1:{port}"))
        async with gateway.session.get(gateway.url + "/") as response:
            assert await response.read() == b"bytes"
            assert "Content-Type" not in response.headers
    finally:
        server.close()
        await server.wait_closed()


UPSTREAM_PATHS = {
    "base-path": ({"prefix": "/", "base": "/v2"}, "/items?q=1", "/v2/items?q=1"),
    "prefix-kept": ({"prefix": "/svc", "base": ""}, "/svc/items", "/svc/items"),
    "prefix-stripped": (
        {"prefix": "/svc", "base": "/v2", "strip_prefix": True},
        "/svc/items?q=%2F",
        "/v2/items?q=%2F",
    ),
    "prefix-stripped-bare": ({"prefix": "/svc", "base": "", "strip_prefix": True}, "/svc", "/"),
}


@pytest.mark.parametrize(
    ("route", "sent", "received"), list(UPSTREAM_PATHS.values()), ids=list(UPSTREAM_PATHS)
)
async def test_upstream_base_path_and_prefix_stripping(
    route: dict[str, object],
    sent: str,
    received: str,
    upstream: tuple[Upstream, str],
    start_gateway: StartGateway,
) -> None:
    recorder, base = upstream
    spec = {k: v for k, v in route.items() if k != "base"}
    config = {"routes": [{"name": "api", "upstream": f"{base}{route['base']}", **spec}]}
    gateway = await start_gateway(config)
    async with gateway.session.get(URL(gateway.url + sent, encoded=True)) as response:
        assert response.status == 200
    assert recorder.paths() == [received]
