"""Request smuggling and parsing (docs/security.md): raw bytes at the gateway, a recorder behind it.

Each malformed request is written over a socket with a well-formed request pipelined behind
it. The gateway must answer 400 and close the connection, and nothing may reach the
upstream: not the malformed request, and not the pipelined one merged into it or smuggled
out of its body. The Transfer-Encoding mutation matrix (13 bytes by 10 positions around the
header name and value, after smuggler.py) is generated here rather than vendored; for those
the invariant is framing agreement, since some mutations are legal HTTP that simply is not a
Transfer-Encoding header.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from yarl import URL

from tests.support.gateway import RunningGateway, StartGateway, StartUpstream, route_config

SECOND = b"GET /second HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: gw\r\n\r\n"


@dataclass
class Recorder:
    """Every request that reached the upstream: method, raw path and whole body."""

    seen: list[tuple[str, str, bytes]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.raw_path, await request.read()))
        return web.Response(text=f"answer for {request.raw_path}")

    @property
    def paths(self) -> list[str]:
        return [path for _, path, _ in self.seen]


@dataclass(frozen=True)
class Conversation:
    """Everything the gateway wrote back on one connection, split into responses."""

    statuses: list[int]
    bodies: list[bytes]
    closed: bool


async def converse(gateway: RunningGateway, data: bytes, *, within: float = 5) -> Conversation:
    """Write `data` in one go, read until the gateway closes (or `within` passes)."""
    url = URL(gateway.url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    raw, closed = b"", False
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(within):
            while chunk := await reader.read(65536):
                raw += chunk
            closed = True
    except TimeoutError:
        pass
    except ConnectionResetError:
        closed = True
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    statuses, bodies = split_responses(raw)
    return Conversation(statuses, bodies, closed)


def split_responses(raw: bytes) -> tuple[list[int], list[bytes]]:
    """Frame responses by Content-Length (the gateway always sends one on these paths)."""
    statuses: list[int] = []
    bodies: list[bytes] = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, f"incomplete response head: {raw[:200]!r}"
        lines = head.split(b"\r\n")
        assert lines[0].startswith(b"HTTP/1."), lines[0]
        statuses.append(int(lines[0].split(b" ")[1]))
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        bodies.append(rest[:length])
        raw = rest[length:]
    return statuses, bodies


@pytest.fixture
async def recorded(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> tuple[Recorder, RunningGateway]:
    recorder = Recorder()
    gateway = await start_gateway(route_config(await start_upstream(recorder.app())))
    return recorder, gateway


def post(head_lines: bytes, body: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    return b"POST /first " + version + b"\r\nHost: gw\r\n" + head_lines + b"\r\n" + body


def chunked_post(extra: bytes, body: bytes) -> bytes:
    return post(b"Transfer-Encoding: chunked\r\n" + extra, body)


MALFORMED: dict[str, bytes] = {
    "cl-and-te": post(
        b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + SMUGGLED
    ),
    "te-and-cl": post(
        b"Transfer-Encoding: chunked\r\nContent-Length: 6\r\n", b"0\r\n\r\n" + SMUGGLED
    ),
    "duplicate-cl-same": post(b"Content-Length: 3\r\nContent-Length: 3\r\n", b"abc"),
    "duplicate-cl-different": post(b"Content-Length: 3\r\nContent-Length: 40\r\n", b"abc"),
    "cl-plus-sign": post(b"Content-Length: +3\r\n", b"abc"),
    "cl-hex": post(b"Content-Length: 0x3\r\n", b"abc"),
    "cl-list": post(b"Content-Length: 3, 3\r\n", b"abc"),
    "cl-negative": post(b"Content-Length: -3\r\n", b"abc"),
    "cl-huge": post(b"Content-Length: 99999999999999999999999999\r\n", b"abc"),
    "te-xchunked": post(b"Transfer-Encoding: xchunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    "te-chunked-identity": post(
        b"Transfer-Encoding: chunked, identity\r\n", b"3\r\nabc\r\n0\r\n\r\n"
    ),
    "te-identity": post(b"Transfer-Encoding: identity\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    "te-duplicated": chunked_post(b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    "te-space-before-colon": post(b"Transfer-Encoding : chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    "te-obs-fold": post(b"Transfer-Encoding:\r\n chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    "te-vertical-tab": post(b"Transfer-Encoding:\x0bchunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    "te-on-http10": post(
        b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n", version=b"HTTP/1.0"
    ),
    "chunk-size-0x": chunked_post(b"", b"0x3\r\nabc\r\n0\r\n\r\n"),
    "chunk-size-negative": chunked_post(b"", b"-3\r\nabc\r\n0\r\n\r\n"),
    "chunk-size-overflow": chunked_post(b"", b"1" + b"0" * 16 + b"3\r\nabc\r\n0\r\n\r\n"),
    "chunk-size-leading-space": chunked_post(b"", b" 3\r\nabc\r\n0\r\n\r\n"),
    "chunk-ext-with-lf": chunked_post(b"", b"3;ext\nabc\r\n0\r\n\r\n"),
    "chunk-data-overrun": chunked_post(b"", b"3\r\nabcdef\r\n0\r\n\r\n"),
    "chunk-bare-lf": chunked_post(b"", b"3\nabc\n0\n\n"),
    "bare-lf-line-endings": b"GET /first HTTP/1.1\nHost: gw\n\n",
    "bare-cr-in-value": b"GET /first HTTP/1.1\r\nHost: gw\r\nX-A: a\rb\r\n\r\n",
    "nul-in-value": b"GET /first HTTP/1.1\r\nHost: gw\r\nX-A: a\x00b\r\n\r\n",
    "space-in-name": b"GET /first HTTP/1.1\r\nHost: gw\r\nX A: b\r\n\r\n",
    "two-hosts": b"GET /first HTTP/1.1\r\nHost: gw\r\nHost: evil.example\r\n\r\n",
    "no-host": b"GET /first HTTP/1.1\r\nX-A: b\r\n\r\n",
    "ctl-in-path": b"GET /fir\x01st HTTP/1.1\r\nHost: gw\r\n\r\n",
    "del-in-path": b"GET /fir\x7fst HTTP/1.1\r\nHost: gw\r\n\r\n",
    "tab-in-path": b"GET /fir\tst HTTP/1.1\r\nHost: gw\r\n\r\n",
    "space-in-path": b"GET /fir st HTTP/1.1\r\nHost: gw\r\n\r\n",
}


@pytest.mark.parametrize("data", list(MALFORMED.values()), ids=list(MALFORMED))
async def test_malformed_request_is_400_closed_and_never_forwarded(
    data: bytes, recorded: tuple[Recorder, RunningGateway]
) -> None:
    recorder, gateway = recorded
    talk = await converse(gateway, data + SECOND)
    assert talk.statuses == [400], talk
    assert talk.closed, "the connection must be closed after a framing error"
    assert recorder.seen == []
    # The gateway itself is unharmed.
    after = await converse(gateway, SECOND)
    assert after.statuses == [200]
    assert recorder.paths == ["/second"]


# Framing llhttp accepts and the gateway refuses (RFC 9112 §6.1). Each goes alone: behind a
# pipelined request an HTTP/1.0 head was refused anyway (for data after its end), so only a
# request with nothing behind it showed that it was accepted and its body forwarded.
FAULTY_FRAMING: dict[str, bytes] = {
    "te-gzip-chunked": post(b"Transfer-Encoding: gzip, chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"),
    "te-deflate-chunked-upper-case": post(
        b"Transfer-Encoding: DEFLATE, Chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"
    ),
    "te-gzip-then-chunked-lines": post(
        b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"
    ),
    "te-chunked-on-http10": post(
        b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n", version=b"HTTP/1.0"
    ),
    "te-chunked-on-http10-keep-alive": post(
        b"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n",
        b"3\r\nabc\r\n0\r\n\r\n",
        version=b"HTTP/1.0",
    ),
    "te-gzip-chunked-on-http10": post(
        b"Transfer-Encoding: gzip, chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n", version=b"HTTP/1.0"
    ),
}
VERSIONS: dict[str, bytes] = {
    "no-version": b"GET /first\r\nHost: gw\r\n\r\n",
    "no-version-no-headers": b"GET /first\r\n\r\n",
    "http-0.9": b"GET /first HTTP/0.9\r\nHost: gw\r\n\r\n",
    "http-2.0": b"GET /first HTTP/2.0\r\nHost: gw\r\n\r\n",
    "http-3.0": b"GET /first HTTP/3.0\r\nHost: gw\r\n\r\n",
}


@pytest.mark.parametrize("data", list(FAULTY_FRAMING.values()), ids=list(FAULTY_FRAMING))
async def test_faulty_framing_is_400_closed_and_never_forwarded(
    data: bytes, recorded: tuple[Recorder, RunningGateway]
) -> None:
    recorder, gateway = recorded
    talk = await converse(gateway, data)
    assert talk.statuses == [400], talk
    assert talk.closed
    assert json.loads(talk.bodies[0])["error"]["code"] == "BAD_REQUEST"
    assert recorder.seen == []


@pytest.mark.parametrize("data", list(VERSIONS.values()), ids=list(VERSIONS))
async def test_a_version_the_gateway_does_not_speak_is_505_over_http1(
    data: bytes, recorded: tuple[Recorder, RunningGateway]
) -> None:
    """Before, `GET /first` was answered `HTTP/0.9 200 OK` (with headers) and `HTTP/2.0` as
    `HTTP/2.0 200 OK` on this HTTP/1 connection; `split_responses` insists on `HTTP/1.`."""
    recorder, gateway = recorded
    talk = await converse(gateway, data)
    assert talk.statuses == [505], talk
    assert talk.closed
    assert json.loads(talk.bodies[0])["error"]["code"] == "HTTP_VERSION_NOT_SUPPORTED"
    assert recorder.seen == []


async def test_requests_before_a_refused_head_are_served(
    recorded: tuple[Recorder, RunningGateway],
) -> None:
    """A head refused after the parser has read it ends the connection there: what came
    before it in the same read is answered, in order, and nothing after it is read."""
    recorder, gateway = recorded
    first = b"GET /first HTTP/1.1\r\nHost: gw\r\n\r\n"
    talk = await converse(gateway, first + FAULTY_FRAMING["te-gzip-chunked"] + SECOND)
    assert talk.statuses == [200, 400], talk
    assert talk.closed
    assert recorder.paths == ["/first"]


# --- the Transfer-Encoding mutation matrix ---------------------------------------------------

MUTATION_BYTES = (0x01, 0x04, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1F, 0x20, 0x7F, 0xA0, 0xFF)
TE_NAME, TE_VALUE = b"Transfer-Encoding", b"chunked"


def mutations() -> dict[str, bytes]:
    """Ten placements of one byte around the header name and value (smuggler.py's set)."""
    out: dict[str, bytes] = {}
    for code in MUTATION_BYTES:
        c = bytes([code])
        lines = {
            "before-name": c + TE_NAME + b": " + TE_VALUE,
            "after-name": TE_NAME + c + b": " + TE_VALUE,
            "after-colon": TE_NAME + b":" + c + TE_VALUE,
            "after-value": TE_NAME + b": " + TE_VALUE + c,
            "in-prior-value": b"X: X" + c + TE_NAME + b": " + TE_VALUE,
            "before-next-header": TE_NAME + b": " + TE_VALUE + c + b"X: X",
            "cr-then-byte-before": b"X: X\r" + c + TE_NAME + b": " + TE_VALUE,
            "byte-then-lf-before": b"X: X" + c + b"\n" + TE_NAME + b": " + TE_VALUE,
            "cr-then-byte-after": TE_NAME + b": " + TE_VALUE + b"\r" + c + b"X: X",
            "byte-then-lf-after": TE_NAME + b": " + TE_VALUE + c + b"\nX: X",
        }
        for place, line in lines.items():
            out[f"{code:02x}-{place}"] = line
    return out


MUTATIONS = mutations()
# The body a Content-Length reader sees whole; a chunked reader stops after "0\r\n\r\n" and
# would take the rest for a second request to /smuggled.
PROBE_BODY = b"0\r\n\r\n" + SMUGGLED


@pytest.mark.parametrize("line", list(MUTATIONS.values()), ids=list(MUTATIONS))
async def test_transfer_encoding_mutation_never_desyncs(
    line: bytes, recorded: tuple[Recorder, RunningGateway]
) -> None:
    recorder, gateway = recorded
    head = b"Content-Length: %d\r\n" % len(PROBE_BODY) + line + b"\r\n"
    talk = await converse(gateway, post(head, PROBE_BODY) + SECOND)
    assert talk.closed, "no conversation may hang half-framed"
    assert "/smuggled" not in recorder.paths
    if talk.statuses[:1] == [400]:
        # Refused: nothing went upstream and nothing was answered after it.
        assert talk.statuses == [400]
        assert recorder.seen == []
        return
    # Accepted: then it was read as one Content-Length request, whole, and the pipelined
    # request behind it was answered separately, in order.
    assert talk.statuses == [200, 200], talk
    assert recorder.seen[0][:2] == ("POST", "/first")
    assert recorder.seen[0][2] == PROBE_BODY
    assert recorder.paths == ["/first", "/second"]
    assert talk.bodies == [b"answer for /first", b"answer for /second"]


# --- pipelining and upgrades ---------------------------------------------------------------


def h2c_upgrade(path: bytes) -> bytes:
    return (
        b"GET " + path + b" HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
    )


async def test_h2c_upgrade_is_answered_over_http11_and_ends_the_connection(
    recorded: tuple[Recorder, RunningGateway],
) -> None:
    """aiohttp's parser drops bytes pipelined behind an unsupported upgrade; before the fix the
    client waited for an answer to `/second` until the keep-alive timeout. Now the gateway
    closes after the answer, so the client knows at once that it must resend."""
    recorder, gateway = recorded
    talk = await converse(gateway, h2c_upgrade(b"/first") + SECOND, within=3)
    assert talk.closed
    assert talk.statuses == [200]
    assert 101 not in talk.statuses
    assert recorder.paths == ["/first"]
    # Resent on a new connection, it is answered.
    again = await converse(gateway, SECOND)
    assert again.statuses == [200]


async def test_pipelined_bodies_are_never_merged(
    recorded: tuple[Recorder, RunningGateway],
) -> None:
    recorder, gateway = recorded
    first = post(b"Content-Length: 5\r\n", b"one:1")
    chunked = chunked_post(b"", b"5\r\ntwo:2\r\n0\r\n\r\n")
    talk = await converse(gateway, first + chunked + first + SECOND)
    assert talk.closed
    assert talk.statuses == [200, 200, 200, 200]
    assert recorder.seen == [
        ("POST", "/first", b"one:1"),
        ("POST", "/first", b"two:2"),
        ("POST", "/first", b"one:1"),
        ("GET", "/second", b""),
    ]
