"""One exchange on an upstream connection: the request written, the response head read.

- aiohttp's `StreamWriter` writes the request (header serialisation that refuses CR/LF,
  chunking, back-pressure); a streamed body is held to its declared Content-Length;
- aiohttp's `ResponseHandler` with its C parser reads the answer (line and header limits,
  chunked and length framing, flow control, the per-read `sock_read` timeout); interim
  answers (100 Continue, 103 Early Hints) are passed on before the final one;
- the pool (`gateway.exchange.upstream.pool`) owns the connection before and after: the
  response hands it back through `LinkOwner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import StreamReader, hdrs
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.config.models import LimitsSpec
from gateway.exchange.body import RequestBody
from gateway.exchange.upstream.deadline import ResponseDeadline, expire
from gateway.exchange.upstream.links import (
    CONNECTION_LOST,
    UPSTREAM_ERRORS,
    Link,
    Origin,
    UpstreamFault,
    keep_alive_limit,
    transport_kind,
)
from gateway.failure import TransportKind
from gateway.fence.aiohttp_private import (
    BadHttpMessage,
    BaseTimerContext,
    HttpProcessingError,
    LineTooLong,
    ResponseHandler,
    StreamWriter,
)
from gateway.text.capped_read import read_capped

log = logging.getLogger("mendpoint.upstream")

# Methods that carry no body by definition; any other one without a body says Content-Length: 0
# (as aiohttp and curl do), so an upstream never waits for a body that will not come.
BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})
# The upstream's StreamReader pauses reading above twice this and resumes below it.
# aiohttp's ClientSession uses 256 KiB (three times fewer pauses per 10 MB body and reads
# of uvloop's full 256,000 bytes), but relaying 10 MB cost 10-15 % more CPU with it in
# interleaved runs: smaller buffers keep the bytes in cache between recv and send.
READ_CHUNK = 2**16
# How long a request that says `Expect: 100-continue` waits for the upstream's 100 before its
# body goes anyway (RFC 9110 §10.1.1; curl waits 1 s too): an upstream may ignore Expect.
EXPECT_WAIT_S = 1.0
EMPTY_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
Body = bytes | RequestBody | AsyncIterable[bytes] | None


@dataclass(frozen=True, slots=True)
class CappedBody:
    """What a capped read of a body got: its first bytes, and whether that was all of it."""

    data: bytes
    whole: bool


class LinkOwner(Protocol):
    """The pool a response returns its connection to."""

    def release(self, origin: Origin, conn: Link, *, reusable: bool) -> None: ...

    def detach(self, conn: Link) -> ResponseHandler: ...

    def open_ended(self, conn: Link, headers: CIMultiDictProxy[str]) -> None: ...


class UpstreamResponse:
    """An upstream answer whose body is read from `content` as it arrives."""

    __slots__ = ("_conn", "_origin", "_pool", "content", "fault", "headers", "reason", "status")

    def __init__(
        self,
        status: int,
        reason: str,
        headers: CIMultiDictProxy[str],
        content: StreamReader,
        pool: LinkOwner,
        origin: Origin,
        conn: Link,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content = content
        self._pool = pool
        self._origin = origin
        self._conn: Link | None = conn
        self.fault: TransportKind | None = None
        """Why `chunks()` ended early, when the upstream failed mid-body."""

    @property
    def content_length(self) -> int | None:
        value = self.headers.get(hdrs.CONTENT_LENGTH)
        return int(value) if value is not None and value.isdigit() else None

    async def read_capped(self, cap: int, until: float | None = None) -> CappedBody | TransportKind:
        """Up to `cap` bytes of the body, by the loop time `until` when given; a transport
        fault while reading (reset, read timeout, the deadline) is returned as its kind."""
        try:
            async with asyncio.timeout_at(until) if until is not None else contextlib.nullcontext():
                data, whole = await read_capped(self.content, cap)
        except UPSTREAM_ERRORS as exc:
            return transport_kind(exc)
        return CappedBody(data, whole)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Each buffered chunk of the body as received, without joining the buffer (as
        `iter_any` does); a transport fault ends it early and is kept in `fault`.

        Not `iter_chunks()`: aiohttp's shared empty payload (HEAD, 204, 304, bodiless answers)
        ends that iterator only the first time it is used in a process and then yields
        `(b"", True)` forever, a busy loop. End of body is asked of the stream instead.
        """
        content = self.content
        try:
            while True:
                chunk, _ = await content.readchunk()
                if chunk:
                    yield chunk
                elif content.at_eof():
                    return
        except UPSTREAM_ERRORS as exc:
            self.fault = transport_kind(exc)

    def release(self) -> None:
        """Hand the connection back: pooled if the exchange ended cleanly, closed otherwise."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.after_error = self.status >= 500
            keep_alive = self.headers.get(hdrs.KEEP_ALIVE)
            if keep_alive is not None:
                conn.idle_limit = keep_alive_limit(keep_alive, conn.idle_limit)
            self._pool.release(self._origin, conn, reusable=self.content.is_eof())

    def detach(self) -> ResponseHandler:
        """Take the connection out of the pool for good, open, after a 101 Switching Protocols:
        it now carries a tunnel (`gateway.http.tunnel`), no longer HTTP, and no longer counts
        against `limits.max_upstream_connections`. Its per-read timeout is switched off; the
        tunnel has its own idle timeout."""
        conn, self._conn = self._conn, None
        if conn is None:
            raise RuntimeError("the upstream connection was already released")
        return self._pool.detach(conn)

    def close(self) -> None:
        """Drop the connection whatever its state (the body will not be read)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(self._origin, conn, reusable=False)


class Exchange:
    """Writes one request on a connection and reads its response head, with the parsing
    settings of one config (worked out once, not per request)."""

    def __init__(self, limits: LimitsSpec, loop: asyncio.AbstractEventLoop) -> None:
        self._limits = limits
        self._loop = loop
        self._parsing: dict[str, Any] = {
            "read_until_eof": True,  # no length and no chunking: the close ends the body
            "auto_decompress": False,
            "read_timeout": limits.read_timeout_s,
            "read_bufsize": READ_CHUNK,
            "max_line_size": limits.max_response_header_bytes,
            "max_field_size": limits.max_response_header_bytes,
            "max_headers": limits.max_response_headers,
        }

    async def run(
        self,
        conn: Link,
        origin: Origin,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: Body,
        deadline: ResponseDeadline | None,
        timer: BaseTimerContext,
        pool: LinkOwner,
    ) -> UpstreamResponse:
        await self._send(conn, method, target, headers, body, timer)
        if deadline is None:
            return await self._response_head(conn, origin, pool)
        deadline.arm(functools.partial(expire, conn.protocol))
        try:
            return await self._response_head(conn, origin, pool)
        finally:
            deadline.disarm()

    async def _send(
        self,
        conn: Link,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: Body,
        timer: BaseTimerContext,
    ) -> None:
        protocol = conn.protocol
        protocol.answered = conn.written = False
        conn.go_ahead = None
        protocol.set_response_params(
            timer=timer,  # the total timeout, if any, also bounds reading the body
            skip_payload=method == "HEAD",
            **self._parsing,
        )
        writer = StreamWriter(protocol, self._loop)
        if isinstance(body, bytes):
            headers[hdrs.CONTENT_LENGTH] = str(len(body))
        elif body is None:
            if method not in BODYLESS_METHODS and hdrs.CONTENT_LENGTH not in headers:
                headers[hdrs.CONTENT_LENGTH] = "0"
        elif hdrs.CONTENT_LENGTH not in headers:
            headers[hdrs.TRANSFER_ENCODING] = "chunked"
            writer.enable_chunking()
        # Serialised (and checked for CR/LF) into the writer's buffer; sent with the first
        # body bytes, or at once for a bodiless request: one write either way.
        await writer.write_headers(f"{method} {target} HTTP/1.1", headers)
        if body is None:
            protocol.start_timeout()
            conn.written = True
            writer.set_eof()
        else:
            if headers.get(hdrs.EXPECT, "").lower() == "100-continue":
                # The upstream decides whether the body is wanted: the head goes now, the
                # body after its 100 Continue (or EXPECT_WAIT_S of silence).
                conn.written = True
                writer.send_headers()
                conn.go_ahead = self._loop.create_future()
            declared = None if isinstance(body, bytes) else headers.get(hdrs.CONTENT_LENGTH)
            conn.sender = self._loop.create_task(
                _send_body(writer, conn, body, None if declared is None else int(declared))
            )

    async def _response_head(self, conn: Link, origin: Origin, pool: LinkOwner) -> UpstreamResponse:
        protocol = conn.protocol
        while True:
            try:
                message, payload = await protocol.read()
            except HttpProcessingError as exc:
                self._over_limits(origin, exc)
                raise UpstreamFault(TransportKind.INVALID_RESPONSE, repr(exc)) from exc
            # 1xx interim answers (100 Continue, 103 Early Hints) precede the real one; a 101
            # is final: a tunnel when the gateway asked for a WebSocket, else refused.
            if not (100 <= message.code < 200) or message.code == 101:
                break
            if message.code == 100:
                if conn.go_ahead is not None and not conn.go_ahead.done():
                    conn.go_ahead.set_result(None)
            elif conn.interim is not None:
                await conn.interim(message.code, message.reason, message.headers)
        headers = message.headers
        if hdrs.CONTENT_LENGTH not in headers and message.code != 101 and not payload.is_eof():
            pool.open_ended(conn, headers)
        return UpstreamResponse(message.code, message.reason, headers, payload, pool, origin, conn)

    def _over_limits(self, origin: Origin, exc: HttpProcessingError) -> None:
        """Name the limit an upstream's answer broke, so an operator knows what to raise."""
        limits = self._limits
        if isinstance(exc, LineTooLong):
            limit = f"limits.max_response_header_bytes ({limits.max_response_header_bytes})"
        elif isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc.message):
            limit = f"limits.max_response_headers ({limits.max_response_headers})"
        else:
            return
        log.warning(
            "upstream %s:%d sent a response head over %s; answered 502",
            origin.host,
            origin.port,
            limit,
        )


def replayable(body: bytes | RequestBody | AsyncIterable[bytes] | None) -> bool:
    return (
        body is None
        or isinstance(body, bytes)
        or (isinstance(body, RequestBody) and body.replayable)
    )


def may_replay(
    conn: Link,
    exc: BaseException,
    idempotent: bool,
    body: bytes | RequestBody | AsyncIterable[bytes] | None,
) -> bool:
    """A reused connection the upstream had closed, no byte of an answer, and a request that
    can be sent again unchanged: idempotent, or provably never written."""
    return (
        conn.reused
        and not conn.protocol.answered
        and isinstance(exc, CONNECTION_LOST)
        and replayable(body)
        and (idempotent or not conn.written)
    )


class BodyLengthMismatch(Exception):
    """A streamed body did not match the Content-Length its head declares."""


async def _send_body(
    writer: StreamWriter,
    conn: Link,
    body: bytes | RequestBody | AsyncIterable[bytes],
    declared: int | None,
) -> None:
    """Send the request body; a failure is handed to the response reader, never lost.

    A streamed body framed by a declared Content-Length is held to it: a byte past it would
    be read by the upstream as the start of another request (a request smuggled past the
    route table), and a body that ends short would keep the upstream waiting. Either way the
    connection is dropped instead, with nothing extra written.
    """
    protocol = conn.protocol
    try:
        if conn.go_ahead is not None:
            await asyncio.wait((conn.go_ahead,), timeout=EXPECT_WAIT_S)
            if conn.interim is not None:  # the client may now send the body it holds back
                await conn.interim(100, "Continue", EMPTY_HEADERS)
        if isinstance(body, bytes):
            conn.written = True
            await writer.write_eof(body)
        else:
            left = declared
            async for chunk in body:
                if left is not None:
                    left -= len(chunk)
                    if left < 0:
                        raise BodyLengthMismatch(f"more than the declared {declared} bytes")
                conn.written = True  # the head goes out with the first chunk
                await writer.write(chunk)
            if left:
                raise BodyLengthMismatch(f"{left} bytes short of the declared {declared}")
            conn.written = True
            await writer.write_eof()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the client's body failed (413/408) or the socket did
        # The reader waiting for the response head gets it; the connection is then discarded.
        protocol.set_exception(aiohttp.ClientConnectionError(f"request body: {exc!r}"), exc)
        return
    protocol.start_timeout()


__all__ = [
    "BODYLESS_METHODS",
    "CappedBody",
    "Exchange",
    "LinkOwner",
    "UpstreamResponse",
    "may_replay",
    "replayable",
]
