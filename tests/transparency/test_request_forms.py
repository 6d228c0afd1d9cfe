"""Request forms a gateway must not get wrong: `OPTIONS *`, and request lines it refuses.

`OPTIONS *` asks the server as a whole which options it supports; it goes to the upstream of
the route for "/" in asterisk form and its answer comes back, as direct. A malformed request
line is refused with 400 as aiohttp does, and the log gets one throttled warning line, never
an ERROR with a traceback per request.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.support.gateway import StartGateway, StartRaw, exchange_raw, route_config

ALLOW = b"HTTP/1.1 200 OK\r\nAllow: GET, POST, OPTIONS\r\nContent-Length: 0\r\n\r\n"


async def test_options_asterisk_is_forwarded_as_is(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    targets: list[bytes] = []

    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        targets.append(head.split(b" ")[1])
        if head.startswith(b"OPTIONS * "):
            writer.write(ALLOW)
        else:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    upstream = await start_raw(server)
    gateway = await start_gateway(route_config(upstream.url + "/base", mode="original"))
    request = b"OPTIONS * HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n"
    direct = await exchange_raw(upstream.url, request)
    proxied = await exchange_raw(gateway.url, request)
    assert (proxied.status, proxied.body) == (direct.status, direct.body) == (200, b"")
    assert proxied.headers["Allow"] == direct.headers["Allow"] == "GET, POST, OPTIONS"
    assert targets == [b"*", b"*"]  # no base path put in front of it


@pytest.mark.parametrize(
    ("line", "status"),
    [
        (b"GET /a b c HTTP/1.1", 400),
        (b"GET /a HTTP/9.1", 505),  # a major version it does not speak (RFC 9110 §15.6.6)
        (b"G\x01T /a HTTP/1.1", 400),
    ],
    ids=["spaces-in-target", "bad-version", "control-in-method"],
)
async def test_a_malformed_request_line_is_one_warning_not_a_traceback(
    line: bytes,
    status: int,
    start_raw: StartRaw,
    start_gateway: StartGateway,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise AssertionError("a malformed request must not reach the upstream")

    gateway = await start_gateway(route_config((await start_raw(never)).url))
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    caplog.set_level(logging.WARNING, logger="mendpoint")
    for _ in range(3):
        reply = await exchange_raw(gateway.url, line + b"\r\nHost: gw\r\n\r\n")
        assert reply.status == status
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in problems), problems
    assert len(problems) <= 1  # throttled: one line for the three
    assert all("\n" not in r.getMessage() for r in problems)
