"""A fault-injecting HTTP upstream on 127.0.0.1 for the test suite and the soak script.

One raw asyncio server plays every fault; the request path picks it (`/fault/NAME`, anything
else is a plain `200 ok`), so a single gateway route can meet all of them in turn while
ordinary requests keep flowing. Each fault writes exactly the bytes it names, at the pace it
names, which no HTTP server library would agree to do: RST or FIN before the head, bodies
cut short or dripped a byte at a time, broken framing, a head with hundreds of fields, a
64 MiB error body and a gzip bomb. `FaultServer.seen` counts requests per fault so a test
can prove the gateway sent each request upstream exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import struct
from collections import Counter
from collections.abc import Awaitable, Callable

from tests.support.ports import free_port

Fault = Callable[[asyncio.StreamWriter], Awaitable[None]]

DRIP_INTERVAL_S = 0.3
BIG_BODY_BYTES = 64 << 20
BIG_CHUNK = b"E" * (256 << 10)
BOMB_INFLATED_BYTES = 256 << 20
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Make the coming close an RST instead of a FIN (SO_LINGER with a zero timeout)."""
    sock: socket.socket = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def send(data: bytes, *, rst: bool = False, hold_s: float = 0.0) -> Fault:
    """Write `data`, optionally wait, then close (RST when `rst`)."""

    async def fault(writer: asyncio.StreamWriter) -> None:
        if data:
            writer.write(data)
            await writer.drain()
        if hold_s:
            await asyncio.sleep(hold_s)
        if rst:
            _reset(writer)

    return fault


def drip(head: bytes, body: bytes, *, interval_s: float = DRIP_INTERVAL_S) -> Fault:
    """Send `head` at once, then `body` one byte per interval: no single read ever waits long."""

    async def fault(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        await writer.drain()
        for index in range(len(body)):
            await asyncio.sleep(interval_s)
            writer.write(body[index : index + 1])
            await writer.drain()

    return fault


def big_error_body(*, chunked: bool) -> Fault:
    """A 500 with a 64 MiB body, generated as it is written and never held whole."""

    async def fault(writer: asyncio.StreamWriter) -> None:
        framing = (
            b"Transfer-Encoding: chunked\r\n"
            if chunked
            else b"Content-Length: %d\r\n" % BIG_BODY_BYTES
        )
        writer.write(
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
            + framing
            + b"\r\n"
        )
        for _ in range(BIG_BODY_BYTES // len(BIG_CHUNK)):
            piece = BIG_CHUNK
            if chunked:
                piece = b"%x\r\n%s\r\n" % (len(BIG_CHUNK), BIG_CHUNK)
            writer.write(piece)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    return fault


def gzip_bomb_body() -> bytes:
    """A JSON error that inflates to 256 MiB from a few hundred KiB on the wire.

    Built from concatenated gzip members (RFC 1952 allows any number), so it costs one 4 MiB
    compression instead of a 256 MiB one.
    """
    block = gzip.compress(b" " * (4 << 20), compresslevel=9, mtime=0)
    members = BOMB_INFLATED_BYTES // (4 << 20)
    return (
        gzip.compress(b'{"message": "bomb", "pad": "', mtime=0)
        + block * members
        + gzip.compress(b'"}', mtime=0)
    )


def _gzip_bomb() -> Fault:
    body = gzip_bomb_body()
    head = (
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    return send(head + body)


def _many_headers(count: int) -> bytes:
    fields = b"".join(b"X-Field-%d: v\r\n" % i for i in range(count))
    return b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: 2\r\n\r\nok"


def _slow_head() -> Fault:
    head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"s" * 40 + b"\r\nContent-Length: 2\r\n\r\nok"
    return drip(head[:9], head[9:])


def _lazy(build: Callable[[], Fault]) -> Fault:
    """Build an expensive fault (the bomb) only when it is first asked for."""
    built: list[Fault] = []

    async def fault(writer: asyncio.StreamWriter) -> None:
        if not built:
            built.append(build())
        await built[0](writer)

    return fault


INVALID_JSON = b'{"message": "unterminated'
INVALID_JSON_HEAD = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(INVALID_JSON)
)
DRIP_ERROR = b'{"message": "dripped error body, one byte at a time ...."}'
SHORT_DRIP_ERROR = b'{"message": "slow"}'

FAULTS: dict[str, Fault] = {
    "rst-before-headers": send(b"", rst=True),
    "close-before-headers": send(b""),
    "rst-mid-body": send(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"0123456789", rst=True, hold_s=0.05
    ),
    "short-content-length": send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789"),
    "truncated-chunked": send(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n"
    ),
    "invalid-chunk-size": send(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n0123456789\r\n0\r\n\r\n"
    ),
    "cl-and-te": send(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n"
    ),
    "too-many-headers": send(_many_headers(600)),  # over limits.max_response_headers (500)
    "switching-protocols": send(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
        b"\x00\x00\x12\x04\x00\x00\x00\x00\x00",
        hold_s=0.05,
    ),
    "slow-headers": _slow_head(),
    "drip-error-body": drip(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(DRIP_ERROR),
        DRIP_ERROR,
    ),
    "drip-short-error": drip(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(SHORT_DRIP_ERROR),
        SHORT_DRIP_ERROR,
        interval_s=0.1,
    ),
    "drip-success-body": drip(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n", b"drip"
    ),
    "invalid-json": send(INVALID_JSON_HEAD + INVALID_JSON),
    "big-error-body": big_error_body(chunked=False),
    "big-error-body-chunked": big_error_body(chunked=True),
    "gzip-bomb": _lazy(_gzip_bomb),
}


class FaultServer:
    """The fault-injecting upstream; `url` is its base, `seen` counts requests per fault."""

    def __init__(self) -> None:
        self.url = ""
        self.seen: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> FaultServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._one_connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _one_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Keep-alive for plain requests; every fault ends its connection."""
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            await _skip_body(reader, head)
            target = head.split(b" ", 2)[1].decode("latin-1")
            name = target.removeprefix("/fault/").partition("?")[0]
            fault = FAULTS.get(name) if target.startswith("/fault/") else None
            self.seen[name if fault is not None else "ok"] += 1
            if fault is None:
                writer.write(OK)
                await writer.drain()
                continue
            await fault(writer)
            return


async def _skip_body(reader: asyncio.StreamReader, head: bytes) -> None:
    """Read (and drop) a request body framed by Content-Length or chunked encoding."""
    lowered = head.lower()
    if b"\r\ntransfer-encoding: chunked" in lowered:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return
    marker = b"\r\ncontent-length: "
    if marker in lowered:
        length = int(lowered.split(marker, 1)[1].split(b"\r\n", 1)[0])
        await reader.readexactly(length)


def closed_port_url() -> str:
    """A loopback URL with nothing listening: connecting to it is refused."""
    return f"http://127.0.0.1:{free_port()}"
