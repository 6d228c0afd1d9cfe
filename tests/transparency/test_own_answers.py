"""The gateway's own answers, with real clients (docs/transparency.md#the-gateways-own-answers).

No route, a request body over the limit or too slow, a request head over the limits or
malformed, the connection cap: the gateway answers without asking the upstream. In `original`
mode that answer is the plain text it always was; in the other modes (the route's, the
config's `default_mode` where no route applies, or what `X-Error-Format` asks for) it is a
failure like any other: code, category, class, and a fix that names the limit and its key.
curl and raw sockets are the clients; the upstream counts what reaches it (nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from yarl import URL

from tests.support.curl import CurlResult, curl
from tests.support.gateway import (
    Counter,
    RawResponse,
    RunningGateway,
    StartGateway,
    StartUpstream,
    exchange_framed,
    exchange_raw,
    parse_response,
)

LIMIT = 4096
NO_EXPECT = ("-H", "Expect:")  # curl would wait for a 100 Continue before a large body


@pytest.fixture
async def upstream(start_upstream: StartUpstream) -> tuple[Counter, str]:
    counter = Counter()
    return counter, await start_upstream(counter.app())


def config(base: str, *, default_mode: str | None = None, **route: Any) -> dict[str, Any]:
    """One route under `/api` (so `/elsewhere` has none), with small limits."""
    spec = {"name": "api", "prefix": "/api", "upstream": base, **route}
    out: dict[str, Any] = {
        "routes": [spec],
        "limits": {"max_request_body_bytes": LIMIT, "request_body_timeout_s": 0.5},
    }
    if default_mode is not None:
        out["default_mode"] = default_mode
    return out


def head_of(result: CurlResult) -> str:
    return result.heads[-1].lower()


def envelope_of(body: bytes) -> dict[str, Any]:
    envelope: dict[str, Any] = json.loads(body)
    assert envelope["ok"] is False and envelope["data"] is None
    assert envelope["meta"]["upstream_status"] is None and envelope["meta"]["original"] is None
    assert envelope["recovery"] == {"available": False, "options": []}
    return envelope


# --- no route -------------------------------------------------------------------------------


async def test_no_route_in_original_mode_is_the_plain_text_it_always_was(
    upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    counter, base = upstream
    gateway = await start_gateway(config(base, default_mode="original"))
    answer = await curl(gateway.url + "/elsewhere")
    assert (answer.status, answer.body) == (404, b"No route for this path\n")
    assert "content-type: text/plain; charset=utf-8" in head_of(answer)
    assert "x-error-code" not in head_of(answer)
    assert counter.hits == 0


@pytest.mark.parametrize("default_mode", [None, "additive", "envelope"])
async def test_no_route_is_a_route_not_found_failure(
    default_mode: str | None, upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    counter, base = upstream
    gateway = await start_gateway(config(base, default_mode=default_mode))
    answer = await curl(gateway.url + "/elsewhere", "-H", "X-Request-Id: lost-1")
    assert answer.status == 404
    assert "content-type: application/json" in head_of(answer)
    assert "x-error-code: route_not_found" in head_of(answer)
    envelope = envelope_of(answer.body)
    error = envelope["error"]
    assert (error["code"], error["retryable"], error["fix_required"]) == (
        "ROUTE_NOT_FOUND",
        False,
        None,
    )
    assert error["request_id"] == "lost-1"
    assert envelope["failure"]["category"] == "NOT_FOUND"
    assert envelope["meta"]["exit_code"] == 3
    assert envelope["meta"]["refusal"] == "no_route"
    # Nothing of the route table leaks: no route name, prefix, upstream host or port.
    url = URL(base)
    for secret in ('"api"', "/api", str(url.port), "127.0.0.1"):
        assert secret not in answer.body.decode()
    assert counter.hits == 0


@pytest.mark.parametrize(
    ("default_mode", "asked", "json_body", "advisory"),
    [
        ("original", "envelope", True, True),
        ("original", "additive", True, True),
        ("additive", "original", False, False),
        ("envelope", "headers", False, True),
    ],
)
async def test_no_route_honours_x_error_format(
    default_mode: str,
    asked: str,
    json_body: bool,
    advisory: bool,
    upstream: tuple[Counter, str],
    start_gateway: StartGateway,
) -> None:
    _, base = upstream
    gateway = await start_gateway(config(base, default_mode=default_mode))
    answer = await curl(gateway.url + "/elsewhere", "-H", f"X-Error-Format: {asked}")
    assert answer.status == 404
    if json_body:
        assert envelope_of(answer.body)["error"]["code"] == "ROUTE_NOT_FOUND"
    else:
        assert answer.body == b"No route for this path\n"
    assert ("x-error-code: route_not_found" in head_of(answer)) is advisory


# --- request body over the limit, or too slow -----------------------------------------------


async def test_a_body_over_the_limit_in_original_mode_is_plain_text(
    upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    counter, base = upstream
    gateway = await start_gateway(config(base, mode="original"))
    body = "x" * (LIMIT + 1)
    answer = await curl(gateway.url + "/api/upload", *NO_EXPECT, "--data-binary", body)
    assert (answer.status, answer.body) == (413, b"Request body too large\n")
    assert "x-error-code" not in head_of(answer)
    assert counter.hits == 0


@pytest.mark.parametrize(
    ("route", "asked"),
    [
        ({"mode": "envelope"}, None),
        ({"mode": "additive"}, None),
        ({"mode": "original"}, "envelope"),
        ({"mode": "original", "type": "mcp"}, "envelope"),
    ],
    ids=["envelope", "additive", "asked-for", "mcp-route"],
)
async def test_a_body_over_the_limit_is_payload_too_large_naming_the_limit(
    route: dict[str, str],
    asked: str | None,
    upstream: tuple[Counter, str],
    start_gateway: StartGateway,
) -> None:
    counter, base = upstream
    gateway = await start_gateway(config(base, **route))
    ask = ("-H", f"X-Error-Format: {asked}") if asked else ()
    body = "x" * (LIMIT + 1)
    answer = await curl(gateway.url + "/api/upload", *NO_EXPECT, *ask, "--data-binary", body)
    assert answer.status == 413
    envelope = envelope_of(answer.body)
    error = envelope["error"]
    assert (error["code"], error["retryable"], error["recoverable"]) == (
        "PAYLOAD_TOO_LARGE",
        False,
        True,
    )
    assert f"at most {LIMIT} bytes" in error["fix_required"]
    assert "limits.max_request_body_bytes" in error["fix_required"]
    assert envelope["failure"]["category"] == "PAYLOAD_TOO_LARGE"
    assert envelope["failure"]["recovery_intent"] == {"intent": "payload_reduction"}
    assert envelope["meta"] | {"duration_ms": 0} == {
        "duration_ms": 0,
        "upstream_status": None,
        "rule": "gateway-body-too-large",
        "exit_code": 11,
        "original": None,
        "refusal": "body_too_large",
    }
    assert counter.hits == 0


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@pytest.mark.parametrize("mode", ["original", "envelope"])
async def test_a_chunked_body_over_the_limit_ends_the_connection_in_every_mode(
    mode: str, upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(config(base, mode=mode))
    head = b"POST /api/upload HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer = await exchange_raw(gateway.url, head + chunked([b"z" * 1000] * 10))
    assert answer.status == 413
    assert answer.headers["Connection"] == "close"
    assert int(answer.headers["Content-Length"]) == len(answer.body)
    if mode == "original":
        assert answer.body == b"Request body too large\n"
    else:
        assert envelope_of(answer.body)["error"]["code"] == "PAYLOAD_TOO_LARGE"


@pytest.mark.parametrize("mode", ["original", "headers", "envelope"])
async def test_a_stalled_body_is_request_timeout_naming_the_timeout(
    mode: str, upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    gateway = await start_gateway(config(base, mode=mode))
    head = b"POST /api/upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n"
    answer = await exchange_framed(gateway.url, head + b"only ten!!")  # then nothing
    assert answer.status == 408
    assert answer.headers["Connection"] == "close"
    if mode != "envelope":
        assert answer.body == b"Request body not received in time\n"
        assert ("X-Error-Code" in answer.headers) is (mode == "headers")
        return
    envelope = envelope_of(answer.body)
    error = envelope["error"]
    assert (error["code"], error["retryable"]) == ("REQUEST_TIMEOUT", False)
    assert "0.5 s" in error["fix_required"]
    assert "limits.request_body_timeout_s" in error["fix_required"]
    assert envelope["failure"]["category"] == "TIMEOUT"
    assert envelope["meta"]["refusal"] == "body_timeout"


# --- request heads the parser refuses -------------------------------------------------------

MAX_FIELD = 8190  # limits.max_header_bytes and limits.max_line_bytes, by default

HEADS = {
    "field-too-long": (
        b"GET /api/ HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"a" * (MAX_FIELD + 1) + b"\r\n\r\n",
        431,
        "REQUEST_HEADERS_TOO_LARGE",
        "limits.max_header_bytes",
    ),
    "too-many-fields": (
        b"GET /api/ HTTP/1.1\r\nHost: gw\r\n"
        + b"".join(b"X-F%d: v\r\n" % i for i in range(101))
        + b"\r\n",
        431,
        "REQUEST_HEADERS_TOO_LARGE",
        "limits.max_headers",
    ),
    "target-too-long": (
        b"GET /api/" + b"p" * (MAX_FIELD + 1) + b" HTTP/1.1\r\nHost: gw\r\n\r\n",
        414,
        "URI_TOO_LONG",
        "limits.max_line_bytes",
    ),
    "malformed": (b"GARBAGE\r\n\r\n", 400, "BAD_REQUEST", "well-formed HTTP/1.1"),
}


@pytest.mark.parametrize("case", HEADS, ids=list(HEADS))
async def test_a_refused_head_in_original_mode_is_plain_text(
    case: str, upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    counter, base = upstream
    data, status, _, _ = HEADS[case]
    gateway = await start_gateway(config(base, default_mode="original"))
    answer = await exchange_raw(gateway.url, data)
    assert answer.status == status
    assert answer.headers["Content-Type"].startswith("text/plain")
    assert "X-Error-Code" not in answer.headers
    assert int(answer.headers["Content-Length"]) == len(answer.body)
    assert counter.hits == 0


@pytest.mark.parametrize("case", HEADS, ids=list(HEADS))
async def test_a_refused_head_in_headers_mode_is_the_plain_text_with_advisory_headers(
    case: str, upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    data, status, code, _ = HEADS[case]
    plain = await start_gateway(config(base, default_mode="original"))
    shadow = await start_gateway(config(base, default_mode="headers"))
    original, headers = await exchange_raw(plain.url, data), await exchange_raw(shadow.url, data)
    assert original.status == headers.status == status
    assert headers.body == original.body and original.body
    assert headers.headers["Content-Type"] == original.headers["Content-Type"]
    assert headers.headers["X-Error-Code"] == code
    assert headers.headers["X-Error-Retryable"] == "false"
    assert headers.headers["Connection"] == "close"


@pytest.mark.parametrize("case", HEADS, ids=list(HEADS))
async def test_a_refused_head_is_a_failure_in_the_default_mode(
    case: str, upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    counter, base = upstream
    data, status, code, fix = HEADS[case]
    # The route's mode does not apply: no route was found, nothing of the head was read.
    gateway = await start_gateway(config(base, mode="original"))
    answer = await exchange_raw(gateway.url, data)
    assert answer.status == status
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.headers["Connection"] == "close"
    assert answer.headers["X-Error-Code"] == code
    assert int(answer.headers["Content-Length"]) == len(answer.body)
    envelope = envelope_of(answer.body)
    error = envelope["error"]
    assert (error["code"], error["retryable"]) == (code, False)
    assert fix in error["fix_required"]
    assert error["request_id"] == answer.headers["X-Request-Id"]
    assert envelope["failure"]["category"] == "VALIDATION_ERROR"
    assert envelope["meta"]["exit_code"] == 2
    assert counter.hits == 0


# --- the connection cap -------------------------------------------------------------------------


async def _refused_over_the_cap(gateway: RunningGateway) -> tuple[bytes, RawResponse]:
    """Hold the one connection the cap allows, then read what a second one is told."""
    url = URL(gateway.url)
    held = await asyncio.open_connection(url.host, url.port)
    try:
        server = gateway.server.runner.server
        assert server is not None
        for _ in range(500):
            if len(server.connections) == 1:
                break
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(url.host, url.port)
        try:
            async with asyncio.timeout(10):
                raw = await reader.read(-1)  # written and closed before any byte is read
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    finally:
        held[1].close()
        with contextlib.suppress(ConnectionError):
            await held[1].wait_closed()
    return raw, parse_response(raw)


async def test_the_connection_cap_in_original_mode_is_the_fixed_plain_503(
    upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    settings = config(base, default_mode="original")
    settings["limits"]["max_client_connections"] = 1
    raw, _ = await _refused_over_the_cap(await start_gateway(settings))
    assert raw == (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 33\r\nConnection: close\r\n\r\nGateway connection limit reached\n"
    )


async def test_the_connection_cap_is_a_retryable_failure(
    upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    settings = config(base)
    settings["limits"]["max_client_connections"] = 1
    raw, answer = await _refused_over_the_cap(await start_gateway(settings))
    assert raw.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert answer.headers["Connection"] == "close"
    assert answer.headers["Retry-After"] == "1"
    assert answer.headers["Content-Type"] == "application/json"
    assert int(answer.headers["Content-Length"]) == len(answer.body)
    envelope = envelope_of(answer.body)
    error = envelope["error"]
    assert (error["code"], error["retryable"], error["retry_after_ms"]) == (
        "GATEWAY_OVERLOADED",
        True,
        1000,
    )
    assert error["fix_required"] is None
    assert error["request_id"] == answer.headers["X-Request-Id"]
    assert envelope["failure"]["category"] == "UNAVAILABLE"
    assert envelope["meta"]["exit_code"] == 6


async def test_the_connection_cap_in_headers_mode_keeps_the_plain_text(
    upstream: tuple[Counter, str], start_gateway: StartGateway
) -> None:
    _, base = upstream
    settings = config(base, default_mode="headers")
    settings["limits"]["max_client_connections"] = 1
    raw, answer = await _refused_over_the_cap(await start_gateway(settings))
    assert raw.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert answer.body == b"Gateway connection limit reached\n"
    assert int(answer.headers["Content-Length"]) == len(answer.body)
    assert answer.headers["X-Error-Code"] == "GATEWAY_OVERLOADED"
    assert answer.headers["X-Error-Retryable"] == "true"
    assert answer.headers["Retry-After"] == "1"
    assert answer.headers["Connection"] == "close"
