"""Paths stay in their route, for the gateway and for every server behind it
(docs/transparency.md#paths, docs/configuration.md#paths).

Behind a route `prefix: /public, strip_prefix: true` to `http://up/public-base`, `/admin`
was a 404 while `/public/../admin`, `/public/%2e%2e/admin` and `/public/..%2fadmin` reached
the upstream, and nginx served its `/admin` location for them. With `/mcp` an MCP route and
`/` an HTTP route to the same Express server, `POST /MCP` opened a session past the Origin
check `/mcp` gets. Each spelling is sent with raw sockets or `curl --path-as-is` (no client
library sends them), to an aiohttp server that records the raw target, to nginx, and to the
reference MCP server; legitimate paths are sent direct and through and must arrive the same.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.config.route_model import PathSpec, RouteSpec
from gateway.exchange.routes import RouteTable
from tests.support.curl import curl
from tests.support.gateway import RawResponse, StartGateway, StartUpstream, exchange_raw
from tests.support.mcp import INIT
from tests.support.upstreams import everything_http, nginx_server


@dataclass
class PathRecorder:
    """An upstream that records each request's target exactly as it arrived."""

    seen: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application(handler_args={"auto_decompress": False})
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(request.raw_path)
        return web.Response(text=f"seen {request.raw_path}")


def public_route(upstream: str, **path: Any) -> dict[str, Any]:
    """The issue's route: `/public`, prefix stripped, to the upstream's `/public-base`."""
    route = {
        "name": "public",
        "prefix": "/public",
        "strip_prefix": True,
        "upstream": upstream + "/public-base",
        "mode": "envelope",
    }
    if path:
        route["path"] = path
    return {"admin": None, "routes": [route]}


async def send(base_url: str, target: str, method: str = "GET", **headers: str) -> RawResponse:
    """One request with `target` as the exact bytes of its request line."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = f"{method} {target} HTTP/1.1\r\nHost: gw.example\r\n{head}Connection: close\r\n\r\n"
    return await exchange_raw(base_url, request.encode("latin-1"))


def error_code(response: RawResponse) -> str:
    code: str = json.loads(response.body)["error"]["code"]
    return code


# Each one reached the upstream before the fix: out of /public-base, or above the root.
LEAVING = {
    "dot-dot": "/public/../admin",
    "encoded-dots": "/public/%2e%2e/admin",
    "encoded-dots-upper-case": "/public/%2E%2E/admin",
    "half-encoded-dots": "/public/.%2e/admin",
    "dots-then-encoded-slash": "/public/..%2fadmin",
    "dots-then-encoded-slash-upper-case": "/public/..%2Fadmin",
    "all-encoded": "/public/%2e%2e%2fadmin",
    "encoded-slashes-inside-a-segment": "/public/a%2f..%2f..%2fadmin",
    "dots-then-encoded-backslash": "/public/..%5cadmin",
    "dots-then-backslash": "/public/..\\admin",
    "dots-with-a-path-parameter": "/public/..;/admin",
    "encoded-dots-with-a-parameter": "/public/%2e%2e;x/admin",
    "two-levels-up": "/public/x/../../admin",
    "to-the-prefix-parent": "/public/..",
    "encoded-to-the-prefix-parent": "/public/%2e%2e",
    "above-the-root": "/public/../../public/x",
    "empty-segment-then-up": "/public//../../admin",
    "absolute-form": "http://gw.example/public/../admin",
    "absolute-form-encoded": "http://gw.example/public/%2e%2e/admin",
}


@pytest.mark.parametrize("target", list(LEAVING.values()), ids=list(LEAVING))
async def test_a_path_that_leaves_its_route_is_refused_and_never_forwarded(
    target: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    recorder = PathRecorder()
    gateway = await start_gateway(public_route(await start_upstream(recorder.app())))
    answer = await send(gateway.url, target)
    assert answer.status == 400
    assert error_code(answer) == "UNSAFE_PATH"
    assert answer.headers["X-Request-Id"]
    assert recorder.seen == []
    # The route's own paths are served on the same gateway.
    served = await send(gateway.url, "/public/orders")
    assert served.status == 200 and recorder.seen == ["/public-base/orders"]


NGINX_LOCATIONS = """
    location /public-base/ { return 200 "public $uri\\n"; }
    location /admin { return 200 "ADMIN $uri\\n"; }
    location / { return 404 "none\\n"; }
"""
# Tails after /public: nginx, asked directly for /public-base + tail, answers from /admin.
NGINX_ESCAPES = {
    "dot-dot": "/../admin",
    "encoded-dots": "/%2e%2e/admin",
    "dots-then-encoded-slash": "/..%2fadmin",
    "all-encoded": "/%2e%2e%2fadmin",
    "encoded-slashes-inside-a-segment": "/a%2f..%2f..%2fadmin",
    "two-levels-up": "/x/../../admin",
    "empty-segment-then-up": "//../admin",  # nginx merges `//` first; RFC 3986 does not
}


@pytest.mark.parametrize("tail", list(NGINX_ESCAPES.values()), ids=list(NGINX_ESCAPES))
async def test_nginx_behind_the_route_never_serves_its_admin_location(
    tail: str, start_gateway: StartGateway
) -> None:
    """curl --path-as-is, as the issue sent them: direct, nginx decodes and resolves them
    into /admin; through the gateway they are a 400 and nginx logs no request."""
    async with nginx_server(NGINX_LOCATIONS) as (nginx, access_log):
        gateway = await start_gateway(public_route(nginx))
        direct = await curl(nginx + "/public-base" + tail, "--path-as-is")
        assert (direct.status, direct.body) == (200, b"ADMIN /admin\n")
        through = await curl(gateway.url + "/public" + tail, "--path-as-is")
        assert through.status == 400 and b"ADMIN" not in through.body
        assert json.loads(through.body)["error"]["code"] == "UNSAFE_PATH"
        # nginx logs each request once it has answered it, in order: once the marker's line
        # is there, a request from the gateway would have been logged before it.
        await curl(nginx + "/public-base/marker")
        lines = await logged_lines(access_log, until="/public-base/marker")
        assert len(lines) == 2 and tail in lines[0], lines


async def logged_lines(access_log: Path, until: str) -> list[str]:
    """nginx's access log once a line for the path `until` is in it (within 10 s)."""
    async with asyncio.timeout(10):
        while True:
            lines = (await asyncio.to_thread(access_log.read_text)).splitlines()
            if any(f" {until} " in line for line in lines):
                return lines
            await asyncio.sleep(0.02)


# Tails after /public (and after /public-base, direct): every one is forwarded as sent.
LEGITIMATE = {
    "encoded-slash-in-an-identifier": "/projects/group%2Fproject/issues",
    "encoded-space": "/files/a%20b.txt",
    "encoded-utf-8": "/caf%C3%A9/%E2%9C%93",
    "lower-case-escapes": "/caf%c3%a9",
    "encoded-unreserved": "/%7Ebob/%41",
    "query-with-dots-and-slashes": "/search?path=../../etc&next=%2F..%2Fadmin&x=/./",
    "dotted-names": "/v1.2/report.tar.gz",
    "three-dots": "/a/.../b",
    "dot-file": "/.well-known/openid-configuration",
    "double-slash": "/a//b",
    "path-parameter": "/items;v=2/x",
    "double-encoded-slash": "/files/a%252Fb",
    "encoded-percent": "/100%25",
    "malformed-escape": "/a%zz",
    "trailing-slash": "/dir/",
    "dots-inside-names": "/..a/b../.b./%2e%2e%2e",
}


@pytest.mark.parametrize("tail", list(LEGITIMATE.values()), ids=list(LEGITIMATE))
async def test_legitimate_paths_reach_the_upstream_as_sent(
    tail: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """curl --path-as-is, direct and through: the upstream sees the same target both ways."""
    recorder = PathRecorder()
    upstream = await start_upstream(recorder.app())
    gateway = await start_gateway(public_route(upstream))
    direct = await curl(upstream + "/public-base" + tail, "--path-as-is")
    through = await curl(gateway.url + "/public" + tail, "--path-as-is")
    assert direct.status == through.status == 200
    assert through.body == direct.body
    assert recorder.seen == ["/public-base" + tail] * 2


# Tails after /public whose dot segments stay in the route: forwarded resolved.
RESOLVED = {
    "dot-dot": ("/a/../b", "/b"),
    "dot": ("/./x", "/x"),
    "both": ("/a/./b/../c", "/a/c"),
    "up-to-a-directory": ("/x/..", "/"),
    "dot-at-the-end": ("/a/.", "/a/"),
    "out-and-back-in": ("/../public/x", "/x"),
    "encoded-dots": ("/a/%2e%2e/b", "/b"),
    "encoded-dot": ("/a/%2E/b", "/a/b"),
    "with-a-query": ("/a/../b?q=../c&r=%2e%2e", "/b?q=../c&r=%2e%2e"),
    # `/a/b` by RFC 3986, `/b` to nginx (it merges `//` first): in the route either way.
    "empty-segment-then-up": ("/a//../b", "/a/b"),
}


@pytest.mark.parametrize(("tail", "resolved"), list(RESOLVED.values()), ids=list(RESOLVED))
async def test_dot_segments_inside_the_route_are_forwarded_resolved(
    tail: str, resolved: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    recorder = PathRecorder()
    upstream = await start_upstream(recorder.app())
    gateway = await start_gateway(public_route(upstream))
    through = await curl(gateway.url + "/public" + tail, "--path-as-is")
    assert through.status == 200
    assert recorder.seen == ["/public-base" + resolved]
    if "%" not in tail and "//" not in tail and not tail.startswith("/.."):
        # curl resolves literal dot segments itself (RFC 3986 §5.2.4) unless told not to:
        # going direct it asks for what the gateway forwards. (Not for one that climbs out
        # of the base path and back in: direct, that is `/public/x`, the upstream's other
        # area, which is why the gateway resolves before the base path goes in front.)
        await curl(upstream + "/public-base" + tail)
        assert recorder.seen[1] == recorder.seen[0]


# (the route's `path:` settings, the tail after /public, what the upstream sees or 400/404)
SETTINGS = {
    "dots-refused": ({"dot_segments": "refuse"}, "/a/../b", 400),
    "dots-refused-encoded": ({"dot_segments": "refuse"}, "/a/%2e/b", 400),
    "dots-refused-plain-path-served": ({"dot_segments": "refuse"}, "/a/b", "/a/b"),
    "escaped-slash-refused": ({"escaped_slashes": "refuse"}, "/group%2Fproject", 400),
    "escaped-backslash-refused": ({"escaped_slashes": "refuse"}, "/a%5cb", 400),
    "backslash-refused": ({"escaped_slashes": "refuse"}, "/a\\b", 400),
    "escaped-slash-decoded": ({"escaped_slashes": "decode"}, "/group%2Fproject", "/group/project"),
    "escaped-backslash-decoded": ({"escaped_slashes": "decode"}, "/a%5Cb", "/a/b"),
    "decoded-then-resolved": ({"escaped_slashes": "decode"}, "/x/..%2Fy", "/y"),
    "decoded-and-leaving": ({"escaped_slashes": "decode"}, "/..%2fadmin", 400),
    "slashes-merged": ({"merge_slashes": True}, "/a//b///c", "/a/b/c"),
    "slashes-merged-after-the-prefix": ({"merge_slashes": True}, "//x", "/x"),
    "slashes-kept": ({}, "/a//b", "/a//b"),
    "case-folded": ({}, "/x", "/x"),
    "case-sensitive-exact": ({"case_sensitive": True}, "/x", "/x"),
}


@pytest.mark.parametrize(
    ("settings", "tail", "expected"), list(SETTINGS.values()), ids=list(SETTINGS)
)
async def test_each_route_path_setting(
    settings: dict[str, Any],
    tail: str,
    expected: str | int,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
) -> None:
    recorder = PathRecorder()
    gateway = await start_gateway(public_route(await start_upstream(recorder.app()), **settings))
    answer = await send(gateway.url, "/public" + tail)
    if isinstance(expected, int):
        assert answer.status == expected and error_code(answer) == "UNSAFE_PATH"
        assert recorder.seen == []
    else:
        assert answer.status == 200 and recorder.seen == ["/public-base" + expected]


@pytest.mark.parametrize(
    ("prefix", "case_sensitive", "sent", "routed"),
    [
        ("/public", False, "/PUBLIC/x", True),
        ("/public", False, "/Public", True),
        ("/public/", False, "/public", True),
        ("/public/", False, "/Public/x", True),
        ("/Public", False, "/public/x", True),
        ("/public", True, "/PUBLIC/x", False),
        ("/public", True, "/public/x", True),
        ("/public", False, "/publicx", False),
    ],
    ids=[
        "upper-case",
        "mixed-case-bare",
        "trailing-slash-prefix-bare-path",
        "trailing-slash-prefix-mixed-case",
        "mixed-case-prefix",
        "case-sensitive-refuses-upper-case",
        "case-sensitive-exact",
        "segment-boundary",
    ],
)
async def test_prefixes_match_whatever_the_case_and_a_trailing_slash(
    prefix: str,
    case_sensitive: bool,
    sent: str,
    routed: bool,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
) -> None:
    recorder = PathRecorder()
    config = public_route(await start_upstream(recorder.app()), case_sensitive=case_sensitive)
    config["routes"][0]["prefix"] = prefix
    gateway = await start_gateway(config)
    answer = await send(gateway.url, sent)
    if routed:
        # The prefix goes whatever its spelling; the rest of the path as the client sent it.
        assert answer.status == 200 and recorder.seen == ["/public-base" + (sent[7:] or "/")]
    else:
        assert answer.status == 404 and error_code(answer) == "ROUTE_NOT_FOUND"
        assert recorder.seen == []


@pytest.mark.parametrize("mode", ["original", "headers", "additive", "envelope"])
async def test_the_refusal_is_in_the_routes_mode(
    mode: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    recorder = PathRecorder()
    config = public_route(await start_upstream(recorder.app()))
    config["routes"][0]["mode"] = mode
    gateway = await start_gateway(config)
    answer = await send(gateway.url, "/public/../admin")
    assert answer.status == 400 and recorder.seen == []
    if mode in ("original", "headers"):
        assert answer.body == b"Request path leaves its route or is ambiguous\n"
        assert answer.headers.get("X-Error-Code") == ("UNSAFE_PATH" if mode == "headers" else None)
    else:
        error = json.loads(answer.body)["error"]
        assert error["code"] == "UNSAFE_PATH" and error["retryable"] is False
        assert "as a browser would" in error["fix_required"]
        assert "public" not in answer.body.decode()  # names no route, prefix or upstream


async def test_a_path_that_resolves_into_a_route_from_none_is_refused(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """Spelled outside every route, resolved inside one: refused in `default_mode`, not
    served (nor a 404, which would say nothing is there)."""
    recorder = PathRecorder()
    gateway = await start_gateway(public_route(await start_upstream(recorder.app())))
    answer = await send(gateway.url, "/x/../public/admin")
    assert answer.status == 400 and error_code(answer) == "UNSAFE_PATH"
    assert json.loads(answer.body)["meta"]["refusal"] == "unsafe_path"
    assert recorder.seen == []
    unrouted = await send(gateway.url, "/x/../admin")
    assert unrouted.status == 404 and error_code(unrouted) == "ROUTE_NOT_FOUND"


# --- MCP: no spelling of an MCP route's path skips its checks ------------------------------


@pytest.fixture(scope="module")
def everything() -> Iterator[str]:
    with everything_http() as url:
        yield url


def mcp_and_http(server: str) -> dict[str, Any]:
    """The issue's gateway: `/mcp` an MCP route and `/` an HTTP route, to one Express app."""
    return {
        "admin": None,
        "routes": [
            {"name": "tools", "prefix": "/mcp", "type": "mcp", "upstream": server},
            {"name": "site", "prefix": "/", "upstream": server},
        ],
    }


FOREIGN = {
    "Origin": "http://evil.example",
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
}


async def initialize(base_url: str, target: str) -> RawResponse:
    body = json.dumps(INIT)
    headers = {**FOREIGN, "Content-Length": str(len(body))}
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Connection: close\r\n\r\n"
    return await exchange_raw(base_url, (request + body).encode("latin-1"))


# Spellings of /mcp an HTTP route took to the same server before the fix: Express opened a
# session for the first five (it ignores case and a trailing slash), other servers read the
# rest as /mcp (nginx: dots, %XX, //; Tomcat: ;params; IIS: backslashes).
MCP_SPELLINGS = {
    "upper-case": "/MCP",
    "mixed-case-trailing-slash": "/Mcp/",
    "upper-case-trailing-slash": "/MCP/",
    "upper-case-query": "/MCP?x=1",
    "absolute-form-upper-case": "http://127.0.0.1/MCP",
    "double-slash": "//mcp",
    "dot-segment": "/./mcp",
    "in-and-out": "/x/../mcp",
    "encoded-dots": "/x/%2e%2e/mcp",
    "encoded-letter": "/%6dcp",
    "encoded-letter-upper-case": "/%6Dcp",
    "encoded-slash-after": "/mcp%2f",
    "encoded-backslash-after": "/mcp%5c",
    "backslash-after": "/mcp\\",
    "path-parameter": "/mcp;x",
    "encoded-dot-segment-before": "/%2e/mcp",
}


@pytest.mark.parametrize("target", list(MCP_SPELLINGS.values()), ids=list(MCP_SPELLINGS))
async def test_no_spelling_of_an_mcp_route_skips_its_origin_check(
    target: str, everything: str, start_gateway: StartGateway
) -> None:
    gateway = await start_gateway(mcp_and_http(everything))
    answer = await initialize(gateway.url, target)
    assert answer.status in (403, 400), answer
    assert "Mcp-Session-Id" not in answer.headers
    if answer.status == 400:
        assert error_code(answer) == "UNSAFE_PATH"


async def test_the_server_itself_opens_a_session_for_other_spellings(everything: str) -> None:
    """Going direct, Express answers these spellings as `/mcp`: a gateway that routed them
    elsewhere handed a foreign origin a session. `/mcp` through the gateway is the check."""
    for target in ("/mcp", "/MCP", "/Mcp/", "/MCP?x=1"):
        direct = await initialize(everything, target)
        assert direct.status == 200 and direct.headers["Mcp-Session-Id"], target


async def test_an_mcp_route_serves_its_own_spellings_to_an_allowed_client(
    everything: str, start_gateway: StartGateway
) -> None:
    """Without a foreign Origin, the spellings Express serves open sessions through the
    MCP route, as they do directly: the checks ran and let them in."""
    gateway = await start_gateway(mcp_and_http(everything))
    for target in ("/mcp", "/MCP", "/mcp/"):
        body = json.dumps(INIT)
        headers = {k: v for k, v in FOREIGN.items() if k != "Origin"}
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        request = (
            f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
        )
        answer = await exchange_raw(gateway.url, request.encode())
        assert answer.status == 200 and answer.headers["Mcp-Session-Id"], target


def test_a_case_sensitive_mcp_route_beside_a_catch_all_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`path.case_sensitive: true` is the operator's to set, but on an MCP route with a `/`
    route beside it, `/MCP` goes to `/`: the log says so once, when the routes are built."""
    specs = [
        RouteSpec.model_validate(route) for route in mcp_and_http("http://127.0.0.1:9")["routes"]
    ]
    with caplog.at_level(logging.WARNING, logger="mendpoint"):
        RouteTable(specs)
    assert caplog.records == []
    strict = [specs[0].model_copy(update={"path": PathSpec(case_sensitive=True)}), specs[1]]
    with caplog.at_level(logging.WARNING, logger="mendpoint"):
        table = RouteTable(strict)
    assert [r.getMessage() for r in caplog.records] == [
        "route tools: path.case_sensitive: true sends /MCP to route site, past this MCP "
        "route's Origin and Host checks; a server that ignores case (Express does) serves "
        "it as /mcp"
    ]
    assert table.find("/MCP") is table.find("/")
