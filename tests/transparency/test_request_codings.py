"""Request bodies go upstream as the client sent them, whatever their Content-Encoding
(docs/transparency.md#request-bodies).

aiohttp's server inflates gzip and deflate request bodies unless told not to. Forwarding the
inflated bytes under the client's Content-Length let the bytes past that length reach the
upstream as a second request that no route allowed (`GET /smuggled-admin`, `Host: internal`),
and left a legitimate gzip POST waiting for the response timeout. Each test sends the same
request direct and through the gateway with a real client (httpx) and compares what the
upstream saw: one request, the same head fields that describe the body, the same bytes.

MCP routes must read the body themselves: they decode a copy (under the body limit, counted
on the decoded size), forward the original bytes, and refuse a coding they cannot read with
415 in the route's mode; the bridge hands the child the decoded JSON-RPC text.
"""

from __future__ import annotations

import ast
import asyncio
import gzip
import json
import sys
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web
from multidict import CIMultiDict

from gateway.config.models import LimitsSpec
from gateway.exchange.upstream.links import Origin
from gateway.exchange.upstream.pool import UpstreamClient
from gateway.fence.aiohttp_private import server_handler_kwargs
from tests.support.gateway import StartGateway, StartRaw, StartUpstream, route_config
from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS, PACKAGE

SMUGGLED = b"GET /smuggled-admin HTTP/1.1\r\nHost: internal\r\n\r\n"
PAYLOAD = b'{"order": "apple", "quantity": 3}'
# Past the end of the JSON, what a smuggler puts after the length the client declares.
SMUGGLING = PAYLOAD + b"\r\n\r\n" + SMUGGLED


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


# (Content-Encoding, the body bytes sent): every coding the gateway can decode, stacked and
# unknown codings, a body that is not valid in its coding, and codings in other spellings.
CODED = [
    ("gzip", gzip.compress(SMUGGLING)),
    ("x-gzip", gzip.compress(SMUGGLING)),
    ("GZIP", gzip.compress(SMUGGLING)),
    ("deflate", zlib.compress(SMUGGLING)),
    ("deflate", _raw_deflate(SMUGGLING)),
    ("gzip, deflate", zlib.compress(gzip.compress(SMUGGLING))),
    ("deflate,gzip", gzip.compress(zlib.compress(SMUGGLING))),
    ("identity", SMUGGLING),
    ("br", b"\x1b\x20\x00\xf8\xa5\x8a\xc0\x96\xfe\x01"),
    ("zstd", b"(\xb5/\xfd\x04\x00\x00"),
    ("compress", b"\x1f\x9d\x90" + SMUGGLING),
    ("gzip", b"\x1f\x8b\x08\x00not really gzip" + SMUGGLED),
    ("made-up-coding", SMUGGLING),
]
CODED_IDS = [
    "gzip",
    "x-gzip",
    "GZIP",
    "deflate-zlib",
    "deflate-raw",
    "stacked-gzip-deflate",
    "stacked-deflate-gzip",
    "identity",
    "br",
    "zstd",
    "compress",
    "corrupt-gzip",
    "unknown",
]


@dataclass
class Seen:
    method: str
    path: str
    content_encoding: list[str]
    content_length: str | None
    body: bytes


@dataclass
class BodyRecorder:
    """An upstream that reads every request body as raw bytes (aiohttp inflating nothing)."""

    seen: list[Seen] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application(handler_args={"auto_decompress": False})
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(
            Seen(
                request.method,
                request.raw_path,
                request.headers.getall("Content-Encoding", []),
                request.headers.get("Content-Length"),
                await request.read(),
            )
        )
        return web.Response(text=f"answer for {request.raw_path}")


async def _post(url: str, body: bytes, coding: str, *, chunked: bool = False) -> tuple[int, bytes]:
    headers = {"Content-Encoding": coding, "Content-Type": "application/json"}
    content: Any = body
    if chunked:

        async def pieces() -> Any:
            yield body[: len(body) // 2]
            yield body[len(body) // 2 :]

        content = pieces()
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(url + "/public/orders", content=content, headers=headers)
        return response.status_code, response.content


@pytest.mark.parametrize(("coding", "body"), CODED, ids=CODED_IDS)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_http_route_forwards_the_body_as_sent(
    coding: str,
    body: bytes,
    chunked: bool,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
) -> None:
    direct, through = BodyRecorder(), BodyRecorder()
    direct_url = await start_upstream(direct.app())
    gateway = await start_gateway(
        {**route_config(await start_upstream(through.app()), prefix="/public"), "admin": None}
    )
    expected = await _post(direct_url, body, coding, chunked=chunked)
    answered = await _post(gateway.url, body, coding, chunked=chunked)
    assert answered == expected == (200, b"answer for /public/orders")
    # One request each, nothing smuggled behind it, the same bytes and the same framing.
    assert [(s.method, s.path) for s in through.seen] == [("POST", "/public/orders")]
    assert through.seen == direct.seen
    assert through.seen[0].body == body


async def test_http_route_keeps_the_connection_in_step_after_a_gzip_body(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """The request that follows on the same pooled upstream connection gets its own answer
    (the smuggled one's, before, if the smuggled request was slow)."""
    recorder = BodyRecorder()
    gateway = await start_gateway(
        {**route_config(await start_upstream(recorder.app()), prefix="/public"), "admin": None}
    )
    async with httpx.AsyncClient(timeout=10) as client:
        for n in range(3):
            posted = await client.post(
                gateway.url + "/public/orders",
                content=gzip.compress(SMUGGLING),
                headers={"Content-Encoding": "gzip"},
            )
            assert posted.text == "answer for /public/orders", n
            after = await client.get(gateway.url + f"/public/next-{n}")
            assert after.text == f"answer for /public/next-{n}", n
    assert [s.path for s in recorder.seen] == [
        p for n in range(3) for p in ("/public/orders", f"/public/next-{n}")
    ]


def _tool_error_server(seen: list[Seen]) -> web.Application:
    """An MCP server on Streamable HTTP that decodes gzip requests itself (as a server may)
    and answers every `tools/call` with a tool error the gateway upgrades."""

    async def handle(request: web.Request) -> web.Response:
        raw = await request.read()
        seen.append(
            Seen(
                request.method,
                request.raw_path,
                request.headers.getall("Content-Encoding", []),
                request.headers.get("Content-Length"),
                raw,
            )
        )
        coding = request.headers.get("Content-Encoding", "identity")
        text = gzip.decompress(raw) if coding == "gzip" else raw
        message = json.loads(text)
        result = {"content": [{"type": "text", "text": "ENOENT: no such file"}], "isError": True}
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})

    app = web.Application(handler_args={"auto_decompress": False})
    app.router.add_post("/mcp", handle)
    return app


CALL = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "read_note", "arguments": {"name": "x"}},
    }
).encode()
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


async def _mcp_post(url: str, body: bytes, coding: str | None) -> httpx.Response:
    headers = dict(MCP_HEADERS)
    if coding is not None:
        headers["Content-Encoding"] = coding
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(url + "/mcp", content=body, headers=headers)


async def test_mcp_route_reads_a_decoded_copy_and_forwards_the_bytes_as_sent(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    direct: list[Seen] = []
    through: list[Seen] = []
    direct_url = await start_upstream(_tool_error_server(direct))
    upstream = await start_upstream(_tool_error_server(through))
    gateway = await start_gateway(
        {"admin": None, "routes": [{"name": "tools", "type": "mcp", "upstream": upstream}]}
    )
    sent = gzip.compress(CALL)
    plain = await _mcp_post(direct_url, sent, "gzip")
    upgraded = await _mcp_post(gateway.url, sent, "gzip")
    assert through == direct
    assert [s.body for s in through] == [sent] and through[0].content_encoding == ["gzip"]
    # The gateway read the call from its decoded copy: the tool error is tied to its
    # `tools/call` and upgraded; the server's own content item is untouched.
    assert plain.json()["result"]["content"][0]["text"] == "ENOENT: no such file"
    result = upgraded.json()["result"]
    assert result["content"][0] == plain.json()["result"]["content"][0]
    assert "mendpoint/failure" in result["_meta"]


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("br", b"\x1b\x20\x00\xf8\xa5\x8a\xc0\x96\xfe\x01"),
        ("gzip", b"\x1f\x8b\x08\x00 not gzip at all"),
        ("gzip, zstd", b"(\xb5/\xfd"),
    ],
    ids=["unknown", "corrupt", "stacked-unknown"],
)
@pytest.mark.parametrize("mode", ["original", "headers", "additive", "envelope"])
async def test_mcp_route_refuses_a_coding_it_cannot_read_with_415(
    coding: str,
    body: bytes,
    mode: str,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
) -> None:
    seen: list[Seen] = []
    upstream = await start_upstream(_tool_error_server(seen))
    gateway = await start_gateway(
        {
            "admin": None,
            "routes": [{"name": "tools", "type": "mcp", "upstream": upstream, "mode": mode}],
        }
    )
    answer = await _mcp_post(gateway.url, body, coding)
    assert answer.status_code == 415
    assert answer.headers["Accept-Encoding"] == "gzip, deflate"
    assert seen == []  # nothing reached the server
    if mode in ("additive", "envelope"):
        error = answer.json()["error"]
        assert error["code"] == "UNSUPPORTED_CONTENT_ENCODING"
        assert error["retryable"] is False and "gzip or deflate" in error["fix_required"]
    else:
        assert answer.text == "Request body in a Content-Encoding the gateway cannot read\n"
        assert ("X-Error-Code" in answer.headers) == (mode == "headers")


async def test_mcp_route_counts_the_body_limit_on_the_decoded_size(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """A 61 KB gzip body that inflates to 64 MiB is refused at the limit (1 MiB here), not
    inflated whole in memory; a body under the limit either way is served."""
    seen: list[Seen] = []
    upstream = await start_upstream(_tool_error_server(seen))
    gateway = await start_gateway(
        {
            "admin": None,
            "limits": {"max_request_body_bytes": 1 << 20},
            "routes": [{"name": "tools", "type": "mcp", "upstream": upstream}],
        }
    )
    padded = CALL[:-1] + b', "pad": "' + b" " * (64 << 20) + b'"}'
    bomb = gzip.compress(padded, compresslevel=9)
    assert len(bomb) < (1 << 20) < len(padded)
    refused = await _mcp_post(gateway.url, bomb, "gzip")
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert seen == []
    served = await _mcp_post(gateway.url, gzip.compress(CALL), "gzip")
    assert served.status_code == 200 and len(seen) == 1


SDK_STDIO = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]


async def test_bridge_hands_the_child_the_decoded_message(start_gateway: StartGateway) -> None:
    """The bridge writes the JSON-RPC text to the child: a gzip `initialize` opens a session
    as the plain one does; a coding it cannot read is a 415 and starts no child."""
    gateway = await start_gateway(
        {"admin": None, "routes": [{"name": "tools", "type": "mcp", "command": SDK_STDIO}]}
    )
    init = json.dumps(INIT).encode()
    plain = await _mcp_post(gateway.url, init, None)
    coded = await _mcp_post(gateway.url, gzip.compress(init), "gzip")
    assert plain.status_code == coded.status_code == 200
    assert coded.json()["result"] == plain.json()["result"]
    assert coded.headers["Mcp-Session-Id"] != plain.headers["Mcp-Session-Id"]
    refused = await _mcp_post(gateway.url, b"\x1b\x20\x00\xf8", "br")
    assert refused.status_code == 415 and "Mcp-Session-Id" not in refused.headers


async def test_the_gateway_server_inflates_no_request_body(start_gateway: StartGateway) -> None:
    gateway = await start_gateway(route_config("http://127.0.0.1:9"))
    server = gateway.server.runner.server
    assert server is not None
    assert server_handler_kwargs(server)["auto_decompress"] is False


# Where aiohttp is set up in gateway/, and whether it may inflate bodies there: only places
# that read a body for themselves, never one they forward.
MAY_INFLATE = {
    ("gateway/serve/app.py", "_start_admin"): "the admin listener serves no request bodies",
    ("gateway/serve/supervisor.py", "_start_admin"): "the supervisor's admin serves no bodies",
    ("gateway/resolve/remote.py", "_client"): "the resolver's JSON answer, read, not relayed",
}
AIOHTTP_SETUPS = {"AppRunner", "ClientSession", "Server", "set_response_params"}


def _setups() -> list[tuple[str, str, ast.Call]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(PACKAGE.parent))
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                if node.func.attr in AIOHTTP_SETUPS:
                    found.append((relative, function.name, node))
    return found


def _inflates(node: ast.Call) -> bool:
    for keyword in node.keywords:
        if keyword.arg == "auto_decompress":
            return not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False)
        if keyword.arg is None:  # **settings: the mapping must say it
            return False
    return True


def test_no_aiohttp_setting_inflates_a_forwarded_body() -> None:
    """Every server, client session and parser the gateway sets up passes
    `auto_decompress=False`, except the listed places that never forward what they read."""
    setups = _setups()
    names = {(path, function) for path, function, _ in setups}
    assert set(MAY_INFLATE) <= names, "a listed exception no longer exists"
    inflating = [
        f"{path}:{node.lineno} in {function}"
        for path, function, node in setups
        if _inflates(node) and (path, function) not in MAY_INFLATE
    ]
    assert inflating == []
    parsing = Path(PACKAGE / "exchange" / "upstream" / "round_trip.py").read_text()
    assert '"auto_decompress": False' in parsing  # the settings `set_response_params` gets


@pytest.mark.parametrize(
    ("declared", "pieces"),
    [(10, [b"0123456789", b"GET /smuggled"]), (10, [b"01234"])],
    ids=["longer", "shorter"],
)
async def test_a_streamed_body_is_held_to_its_declared_length(
    declared: int, pieces: list[bytes], start_raw: StartRaw
) -> None:
    """Whatever a body stream yields, the upstream never reads a byte past the declared
    Content-Length, nor waits for bytes that will not come: the request fails as a transport
    fault and its connection is dropped, with nothing extra written."""
    received: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(-1))

    upstream = await start_raw(record)
    port = int(upstream.url.rsplit(":", 1)[1])
    client = UpstreamClient(LimitsSpec())

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    headers = CIMultiDict({"Host": "up", "Content-Length": str(declared)})
    try:
        with pytest.raises(aiohttp.ClientConnectionError, match="declared 10"):
            await client.request("POST", Origin("http", "127.0.0.1", port), "/", headers, body())
    finally:
        await client.close()
    for _ in range(100):
        if received:
            break
        await asyncio.sleep(0.02)
    assert b"smuggled" not in received[0]
    assert received[0].count(b"POST / HTTP/1.1") <= 1
