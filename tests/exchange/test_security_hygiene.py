"""Routing and header hygiene under attack (docs/security.md), beyond test_proxy_hygiene.py.

A request target can never pick the upstream; headers named in `Connection` never cross;
`Upgrade: h2c` is never forwarded nor answered 101; an underscore spelling of a header the
gateway vouches for (`X_Forwarded_For`) is dropped, other underscore names pass; oversize
and too many header fields get 431, an over-long target 414, and nothing reaches the upstream.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from multidict import CIMultiDictProxy
from yarl import URL

from tests.support.gateway import (
    RawResponse,
    RunningGateway,
    StartGateway,
    StartUpstream,
    exchange_raw,
    route_config,
)


@dataclass
class Recorder:
    seen: list[tuple[str, CIMultiDictProxy[str]]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.raw_path, request.headers))
        return web.Response(text="ok")

    @property
    def last(self) -> CIMultiDictProxy[str]:
        return self.seen[-1][1]


async def send_raw(gateway: RunningGateway, data: bytes) -> RawResponse:
    """One request over a socket; the response is read to EOF (requests ask to close)."""
    return await exchange_raw(gateway.url, data, timeout_s=5)


def request(head: str, target: str = "/x") -> bytes:
    lines = [f"GET {target} HTTP/1.1", "Host: gw.example", *head.strip().splitlines()]
    lines = [line for line in lines if line] + ["Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@pytest.fixture
async def recorded(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> tuple[Recorder, RunningGateway, str]:
    recorder = Recorder()
    base = await start_upstream(recorder.app())
    return recorder, await start_gateway(route_config(base)), base


# --- the target never chooses the upstream --------------------------------------------------

TARGETS = {
    "absolute-userinfo": ("http://user:pw@evil.example/a", "/a"),
    "absolute-port": ("http://evil.example:9/a?b=1", "/a?b=1"),
    "absolute-ipv6": ("http://[::1]:9/a", "/a"),
    "authority-lookalike": ("//evil.example:9/a", "//evil.example:9/a"),
    "at-sign-path": ("/@evil.example/a", "/@evil.example/a"),
    "backslash-path": ("/\\evil.example/a", "/\\evil.example/a"),
}


@pytest.mark.parametrize(("target", "expected"), list(TARGETS.values()), ids=list(TARGETS))
async def test_target_never_changes_the_upstream(
    target: str, expected: str, recorded: tuple[Recorder, RunningGateway, str]
) -> None:
    recorder, gateway, base = recorded
    reply = await send_raw(gateway, request("", target))
    assert reply.status == 200
    assert [path for path, _ in recorder.seen] == [expected]
    assert recorder.last["Host"] == URL(base).raw_authority


# --- control characters decoded from the path --------------------------------------------

ENCODED_CONTROLS = {
    "crlf-header-injection": "/ok%0d%0aSet-Cookie:%20session=evil",
    "lf": "/ok%0a",
    "lf-upper-case": "/ok%0A/more",
    "cr": "/ok%0D",
    "nul-truncation": "/files/report.pdf%00.txt",
    "del": "/ok%7f",
    "c1-next-line": "/ok%c2%85",
    "in-a-middle-segment": "/api/%0a/x",
}


@pytest.mark.parametrize("target", list(ENCODED_CONTROLS.values()), ids=list(ENCODED_CONTROLS))
async def test_an_encoded_control_character_in_the_path_is_the_gateways_400(
    target: str,
    recorded: tuple[Recorder, RunningGateway, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before, `/ok%0a` got aiohttp's plain 404 (its catch-all regex stopped at the decoded
    newline: no request id, no access line) and `/ok%00` went to the upstream. Now each is
    refused by the gateway in its own shape, logged, and never forwarded
    (docs/transparency.md#paths)."""
    recorder, gateway, _ = recorded
    caplog.set_level(logging.INFO, logger="mendpoint.access")
    reply = await send_raw(gateway, request("", target))
    assert reply.status == 400
    assert recorder.seen == []
    request_id = reply.headers["X-Request-Id"]
    assert reply.headers["X-Error-Code"] == "INVALID_PATH"
    assert json.loads(reply.body)["error"]["request_id"] == request_id
    assert "Set-Cookie" not in reply.headers
    lines = [r.__dict__["fields"] for r in caplog.records if r.name == "mendpoint.access"]
    assert [(line["request_id"], line["status"], line["route"]) for line in lines] == [
        (request_id, 400, "-")
    ]


QUERY_AND_ESCAPES = {
    "lf-in-the-query": "/ok?note=line%0Aline",
    "nul-in-the-query": "/ok?q=%00",
    "an-encoded-percent": "/ok%250a",
    "utf8-letters": "/caf%C3%A9",
}


@pytest.mark.parametrize("target", list(QUERY_AND_ESCAPES.values()), ids=list(QUERY_AND_ESCAPES))
async def test_controls_in_the_query_and_other_escapes_pass_as_sent(
    target: str, recorded: tuple[Recorder, RunningGateway, str]
) -> None:
    """A query carries data, a newline in a search box included: the same bytes reach the
    upstream directly and through the gateway."""
    recorder, gateway, base = recorded
    direct = await exchange_raw(base, request("", target), timeout_s=5)
    through = await send_raw(gateway, request("", target))
    assert direct.status == through.status == 200
    assert [path for path, _ in recorder.seen] == [target, target]


# --- Connection-named headers -------------------------------------------------------------

CONNECTION_NAMES = {
    "close-and-secret": "Connection: close, X-Secret",
    "lower-case": "Connection: close, x-secret",
    "spaces-and-empty-items": "Connection: ,  X-Secret ,, close",
    "second-connection-header": "Connection: keep-alive\nConnection: X-Secret",
}


@pytest.mark.parametrize("line", list(CONNECTION_NAMES.values()), ids=list(CONNECTION_NAMES))
async def test_connection_named_header_is_dropped(
    line: str, recorded: tuple[Recorder, RunningGateway, str]
) -> None:
    recorder, gateway, _ = recorded
    reply = await send_raw(gateway, request(f"{line}\nX-Secret: token\nX-Kept: yes"))
    assert reply.status == 200
    assert "X-Secret" not in recorder.last
    assert "Connection" not in recorder.last
    assert recorder.last["X-Kept"] == "yes"


# --- h2c -------------------------------------------------------------------------------------

H2C = "Connection: Upgrade, HTTP2-Settings\nUpgrade: h2c\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"


async def test_h2c_upgrade_is_not_forwarded_and_never_answered_101(
    recorded: tuple[Recorder, RunningGateway, str],
) -> None:
    recorder, gateway, _ = recorded
    reply = await send_raw(gateway, request(H2C))
    assert reply.status == 200
    assert reply.body == b"ok"
    assert reply.headers["Connection"] == "close"
    for name in ("Upgrade", "HTTP2-Settings", "Connection"):
        assert name not in recorder.last


# --- forwarding headers and the underscore policy ---------------------------------------------

SPOOFS = {
    "x-forwarded-for": ("X_Forwarded_For", "10.6.6.6"),
    "x-forwarded-host": ("X_Forwarded_Host", "evil.example"),
    "x-forwarded-proto": ("x_forwarded_proto", "https"),
    "keep-alive": ("Keep_Alive", "timeout=600"),
    "x-request-id": ("X_Request_Id", "spoofed"),
    "transfer-encoding": ("Transfer_Encoding", "chunked"),
    "content-length": ("Content_Length", "5"),
    "proxy-authorization": ("Proxy_Authorization", "Basic eDp5"),
}


@pytest.mark.parametrize(("name", "value"), list(SPOOFS.values()), ids=list(SPOOFS))
async def test_underscore_spelling_of_a_managed_header_is_dropped(
    name: str, value: str, recorded: tuple[Recorder, RunningGateway, str]
) -> None:
    recorder, gateway, _ = recorded
    reply = await send_raw(gateway, request(f"{name}: {value}"))
    assert reply.status == 200
    assert name not in recorder.last
    assert value not in recorder.last.values()


async def test_other_underscore_headers_pass_unchanged(
    recorded: tuple[Recorder, RunningGateway, str],
) -> None:
    recorder, gateway, _ = recorded
    reply = await send_raw(gateway, request("api_key: k-123\nX_Tenant_Id: acme"))
    assert reply.status == 200
    assert recorder.last["api_key"] == "k-123"
    assert recorder.last["X_Tenant_Id"] == "acme"


async def test_forwarding_headers_from_the_client_are_never_trusted(
    recorded: tuple[Recorder, RunningGateway, str],
) -> None:
    recorder, gateway, _ = recorded
    claims = (
        "X-Forwarded-For: 10.0.0.1\nX-Forwarded-For: 10.0.0.2\n"
        "X-Forwarded-Host: evil.example\nX-Forwarded-Proto: https\n"
        'Forwarded: for=10.9.9.9;host="evil.example";proto=https'
    )
    await send_raw(gateway, request(claims))
    headers = recorder.last
    assert headers["X-Forwarded-For"] == "10.0.0.1, 10.0.0.2, 127.0.0.1"
    assert headers.getall("X-Forwarded-Host") == ["gw.example"]
    assert headers.getall("X-Forwarded-Proto") == ["http"]
    assert headers.getall("Forwarded") == ['for=127.0.0.1;host="gw.example";proto=http']


# --- 431 and 414 -------------------------------------------------------------------------

MAX_HEADERS = 20
MAX_FIELD = 1024
OVERSIZE = {
    "value-too-long": (request("X-Big: " + "a" * (MAX_FIELD + 1)), 431),
    "name-too-long": (request("X-" + "n" * (MAX_FIELD + 1) + ": v"), 431),
    "value-starting-with-a-letter": (request("Cookie: " + "c=1; " * 300), 431),
    "too-many-fields": (request("\n".join(f"X-F{i}: v" for i in range(MAX_HEADERS + 1))), 431),
    "target-too-long": (request("", "/" + "p" * 9000), 414),
    "absolute-target-too-long": (request("", "http://gw.example/" + "p" * 9000), 414),
}


@pytest.mark.parametrize(("data", "status"), list(OVERSIZE.values()), ids=list(OVERSIZE))
async def test_oversize_heads_get_431_or_414_and_are_never_forwarded(
    data: bytes,
    status: int,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
) -> None:
    recorder = Recorder()
    base = await start_upstream(recorder.app())
    limits = {"max_headers": MAX_HEADERS, "max_header_bytes": MAX_FIELD}
    gateway = await start_gateway({**route_config(base), "limits": limits})
    reply = await send_raw(gateway, data)
    assert reply.status == status
    assert recorder.seen == []


async def test_heads_at_the_limits_pass(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    recorder = Recorder()
    base = await start_upstream(recorder.app())
    limits = {"max_headers": MAX_HEADERS, "max_header_bytes": MAX_FIELD}
    gateway = await start_gateway({**route_config(base), "limits": limits})
    # Host and Connection are fields too: MAX_HEADERS in all.
    fields = "\n".join(f"X-F{i}: v" for i in range(MAX_HEADERS - 2))
    assert (await send_raw(gateway, request(fields))).status == 200
    value = "a" * (MAX_FIELD - len("X-Big"))
    assert (await send_raw(gateway, request(f"X-Big: {value}"))).status == 200
    assert len(recorder.seen) == 2
