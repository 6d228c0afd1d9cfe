"""A raw upstream whose answers take each side of the relay's one-write shortcut
(gateway/exchange/relay.py, `arrived_whole`): the path names the shape, the bytes are exact."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway.exchange.relay import SMALL_BODY

# Every byte value, CR LF included, so a framing slip would show.
PATTERN = bytes(range(256))
SPLIT_DELAY_S = 0.2


def body(size: int) -> bytes:
    return (PATTERN * (size // len(PATTERN) + 1))[:size]


def _head(status: str, fields: str) -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: application/octet-stream\r\n{fields}\r\n".encode()


@dataclass(frozen=True)
class Shape:
    head: bytes
    wire: bytes  # the body as sent, framing included
    body: bytes  # what a client reads
    split: bool = False  # the body is written only SPLIT_DELAY_S after the head

    @property
    def status(self) -> int:
        return int(self.head.split()[1])


def _sized(size: int, split: bool = False) -> Shape:
    data = body(size)
    return Shape(_head("200 OK", f"Content-Length: {size}\r\n"), data, data, split)


SHAPES: dict[str, Shape] = {
    "/whole": _sized(200),  # one segment: answered in one write
    "/limit": _sized(SMALL_BODY),  # the largest the shortcut takes
    "/over": _sized(SMALL_BODY + 1),  # one byte too many: streamed
    "/split": _sized(200, split=True),  # the body comes later: streamed as it arrives
    "/empty": _sized(0),
    "/chunked": Shape(
        _head("200 OK", "Transfer-Encoding: chunked\r\n"),
        b"c8\r\n" + body(200) + b"\r\n0\r\n\r\n",
        body(200),
    ),
    "/not-modified": Shape(
        _head("304 Not Modified", 'Content-Length: 200\r\nETag: "v1"\r\n'), b"", b""
    ),
}
SHORTCUT = ("/whole", "/limit", "/empty")  # the shapes `arrived_whole` answers whole


async def serve_shapes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive: answer each request with its path's shape (a HEAD gets the head only)."""
    while True:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        method, path, _ = request.split(b"\r\n", 1)[0].decode().split(" ", 2)
        shape = SHAPES[path]
        if method == "HEAD":
            writer.write(shape.head)
        elif shape.split:
            writer.write(shape.head)
            await writer.drain()
            await asyncio.sleep(SPLIT_DELAY_S)
            writer.write(shape.wire)
        else:
            writer.write(shape.head + shape.wire)
        await writer.drain()
