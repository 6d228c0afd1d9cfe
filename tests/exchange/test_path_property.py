"""A property test of the boundary the route table is (docs/transparency.md#paths,
docs/transparency.md#request-bodies).

Hypothesis builds requests a client could send on a raw socket: path spellings from dot
segments, `%2E`, encoded and raw slashes and backslashes, `//`, `;params` and case, and
bodies in random content codings (gzip, deflate, stacked, unknown, none), framed by a
Content-Length or chunked. They go through a real gateway to a real recording upstream, and
each must end one of two ways: the gateway refused it and nothing reached the upstream, or
the upstream saw exactly one request, inside its route's base path in every reading of the
target, for the route every reading of the client's path names, with the body bytes, the
coding and the framing the client sent.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import posixpath
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote_to_bytes

from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config.loader import load_config
from gateway.serve.app import GatewayServer
from tests.support.gateway import RawResponse, exchange_raw, write_config


@dataclass(frozen=True)
class RouteUnderTest:
    name: str
    prefix: str
    base: str
    strip: bool
    path: dict[str, object] = field(default_factory=dict)


ROUTES = (
    RouteUnderTest("public", "/public", "/public-base", True),
    RouteUnderTest("inner", "/public/inner", "/inner-base", False),
    RouteUnderTest(
        "other",
        "/Other/",
        "/other-base",
        True,
        {"escaped_slashes": "decode", "merge_slashes": True},
    ),
)


@dataclass(frozen=True)
class Seen:
    target: str
    content_encoding: str | None
    content_length: str | None
    chunked: bool
    body: bytes


@dataclass
class Recorder:
    seen: list[Seen] = field(default_factory=list)
    server: TestServer | None = None

    async def start(self) -> str:
        app = web.Application(handler_args={"auto_decompress": False})
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return str(self.server.make_url("")).rstrip("/")

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(
            Seen(
                request.raw_path,
                request.headers.get("Content-Encoding"),
                request.headers.get("Content-Length"),
                request.headers.get("Transfer-Encoding", "").lower() == "chunked",
                await request.read(),
            )
        )
        return web.Response(text="recorded")


# --- what a client sends --------------------------------------------------------------------

PIECES = [
    *("public", "PUBLIC", "Public", "inner", "INNER", "other", "Other", "admin", "a", "%61"),
    *(".", "..", "%2e", "%2E", "%2e%2e", ".%2e", "%2E.", "..."),
    *("%2f", "%2F", "%5c", "%5C", "\\", ";x", ";", "x.y", "%20", "%C3%A9", "%252f", ""),
]
SEGMENT = st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map("".join)
FIRST = st.sampled_from(["public", "Public", "PUBLIC", "Other", "other", "x", "..", "%2e", ""])
PATH = st.builds(
    lambda first, rest, query: "/" + "/".join([first, *rest]) + query,
    FIRST,
    st.lists(SEGMENT, max_size=5),
    st.sampled_from(["", "?q=../..%2F..", "?a=1&b=%2e%2e"]),
)


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


CODINGS: dict[str, Callable[[bytes], bytes]] = {
    "": lambda b: b,
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "deflate-raw": _raw_deflate,
    "gzip, deflate": lambda b: zlib.compress(gzip.compress(b)),
    "deflate, gzip": lambda b: gzip.compress(zlib.compress(b)),
    "br": lambda b: b"\x1b" + b,  # not brotli the gateway could read: it reads none
    "x-made-up": lambda b: b,
}


@dataclass(frozen=True)
class Sent:
    method: str
    target: str
    coding: str
    body: bytes
    chunks: tuple[int, ...] | None  # chunk sizes when chunked, else framed by Content-Length

    def wire(self) -> bytes:
        coding = "deflate" if self.coding == "deflate-raw" else self.coding
        head = [f"{self.method} {self.target} HTTP/1.1", "Host: gw.example", "Connection: close"]
        if coding:
            head.append(f"Content-Encoding: {coding}")
        if self.chunks is None:
            head.append(f"Content-Length: {len(self.body)}")
            framed = self.body
        else:
            head.append("Transfer-Encoding: chunked")
            framed, at = b"", 0
            for size in (*self.chunks, len(self.body)):
                piece = self.body[at : at + size]
                at += len(piece)
                if piece:
                    framed += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
            framed += b"0\r\n\r\n"
        return "\r\n".join(head).encode("latin-1") + b"\r\n\r\n" + framed


@st.composite
def requests(draw: st.DrawFn) -> Sent:
    coding = draw(st.sampled_from(list(CODINGS)))
    payload = draw(
        st.binary(max_size=200)
        | st.sampled_from([b'{"a": 1}', b"GET /smuggled HTTP/1.1\r\nHost: internal\r\n\r\n"])
    )
    return Sent(
        method=draw(st.sampled_from(["POST", "PUT", "PATCH", "DELETE"])),
        target=draw(PATH),
        coding=coding,
        body=CODINGS[coding](payload),
        chunks=draw(st.none() | st.lists(st.integers(1, 64), max_size=4).map(tuple)),
    )


# --- readings the servers behind a gateway take (the oracle, independent of the gateway) ---


def every_server_at_once(path: str) -> str:
    """Decoded once, `\\` and `%2F`/`%5C` as `/`, `;params` dropped, `//` merged, dot
    segments resolved (nginx, Tomcat and IIS together)."""
    text = unquote_to_bytes(path).decode("latin-1").replace("\\", "/")
    parts = [part.partition(";")[0] for part in text.split("/")]
    return posixpath.normpath("/" + "/".join(part for part in parts if part))


def rfc_3986(path: str) -> str:
    """RFC 3986 §5.2.4 with `%2E` decoded (Envoy's `normalize_path`), nothing else."""
    segments = re.sub("%2e", ".", path, flags=re.IGNORECASE)[1:].split("/")
    kept: list[str] = []
    for index, segment in enumerate(segments):
        if segment == "..":
            kept = kept[:-1]
        elif segment != ".":
            kept.append(segment)
        if segment in (".", "..") and index == len(segments) - 1:
            kept.append("")
    return "/" + "/".join(kept)


def under(path: str, prefix: str) -> bool:
    path, prefix = path.lower(), prefix.rstrip("/").lower()
    return prefix == "" or path == prefix or path.startswith(prefix + "/")


def route_of(path: str) -> RouteUnderTest | None:
    matching = [r for r in ROUTES if under(path, r.prefix)]
    return max(matching, key=lambda r: len(r.prefix.rstrip("/")), default=None)


def check(sent: Sent, answer: RawResponse, seen: list[Seen]) -> None:
    assert answer.status < 500, (sent, answer)
    if answer.status != 200:
        # Refused by the gateway itself (or by its parser): nothing reached the upstream.
        assert answer.status in (400, 404), (sent, answer)
        assert seen == [], (sent, seen)
        if answer.body.startswith(b"{"):
            code = json.loads(answer.body)["error"]["code"]
            assert code in ("UNSAFE_PATH", "ROUTE_NOT_FOUND", "BAD_REQUEST"), (sent, code)
        return
    assert len(seen) == 1, (sent, seen)
    got = seen[0]
    path = sent.target.partition("?")[0]
    route = next(r for r in ROUTES if got.target.startswith(r.base))
    # Every reading of the client's path names this route...
    assert route_of(every_server_at_once(path)) is route, (sent, got)
    assert route_of(rfc_3986(path)) is route, (sent, got)
    # ...and every reading of what the upstream got stays in its base path.
    assert under(every_server_at_once(got.target.partition("?")[0]), route.base), (sent, got)
    assert got.target.partition("?")[2] == sent.target.partition("?")[2]
    # The body as sent: the same bytes, coding and framing.
    coding = "deflate" if sent.coding == "deflate-raw" else sent.coding
    assert got.body == sent.body, sent
    assert (got.content_encoding or "") == coding
    if sent.chunks is None:
        assert got.content_length == str(len(sent.body)) and not got.chunked
    else:
        assert got.chunked and got.content_length is None


def test_a_request_is_refused_whole_or_forwarded_once_inside_its_route(tmp_path: Path) -> None:
    with asyncio.Runner() as runner:
        recorder = Recorder()
        upstream = runner.run(recorder.start())
        routes = [
            {
                "name": r.name,
                "prefix": r.prefix,
                "upstream": upstream + r.base,
                "strip_prefix": r.strip,
                "mode": "envelope",
                **({"path": r.path} if r.path else {}),
            }
            for r in ROUTES
        ]
        config = {"admin": None, "default_mode": "envelope", "routes": routes}
        server = GatewayServer(load_config(str(write_config(tmp_path, config))))
        host, port = runner.run(server.start("127.0.0.1:0"))
        outcomes: dict[int, int] = {}
        try:
            # Derandomized: the same 150 requests every run. Random ones reached 400 only 12
            # times in one run of many (the check below wants 20): a flake, not a finding.
            @settings(
                max_examples=150,
                derandomize=True,
                deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture],
            )
            @given(sent=requests())
            def one_request(sent: Sent) -> None:
                recorder.seen.clear()
                answer = runner.run(exchange_raw(f"http://{host}:{port}", sent.wire()))
                outcomes[answer.status] = outcomes.get(answer.status, 0) + 1
                check(sent, answer, list(recorder.seen))

            one_request()
        finally:
            runner.run(server.stop())
            assert recorder.server is not None
            runner.run(recorder.server.close())
    # The generator reaches both outcomes, so neither half of the property is vacuous.
    assert outcomes.get(200, 0) >= 20 and outcomes.get(400, 0) >= 20, outcomes
