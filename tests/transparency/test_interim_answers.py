"""Interim answers (103 Early Hints), direct and through the gateway, with curl.

A 103 lets a browser start fetching what its `Link` headers name before the final answer; a
proxy that swallows it makes pages slower. curl shows every head it receives.
"""

from __future__ import annotations

import asyncio

from tests.support.curl import curl
from tests.support.gateway import StartGateway, StartRaw, route_config

HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload; as=style\r\n\r\n"
FINAL = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello"


def first_line_and_link(head: str) -> tuple[str, list[str]]:
    line, *fields = head.split("\r\n")
    return line, [f for f in fields if f.lower().startswith("link:")]


async def test_early_hints_reach_the_client_before_the_answer(
    start_raw: StartRaw, start_gateway: StartGateway
) -> None:
    async def hinting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HINTS)
            await writer.drain()
            await asyncio.sleep(0.05)  # the application is still working on the page
            writer.write(FINAL)
            await writer.drain()

    upstream = await start_raw(hinting)
    gateway = await start_gateway(route_config(upstream.url))
    direct = await curl(upstream.url + "/page")
    proxied = await curl(gateway.url + "/page")
    assert (proxied.status, proxied.body) == (direct.status, direct.body) == (200, b"hello")
    expected = [first_line_and_link(head) for head in direct.heads]
    assert expected[0] == ("HTTP/1.1 103 Early Hints", ["Link: </app.css>; rel=preload; as=style"])
    assert [first_line_and_link(head) for head in proxied.heads] == expected
