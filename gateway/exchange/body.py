"""Streaming bodies through the gateway without buffering them.

`RequestBody` relays the client's body to the upstream chunk by chunk under a size cap and a
per-chunk stall timeout, and remembers why it stopped so the handler can answer 413 or 408
instead of blaming the upstream. Error bodies are read with `gateway.text.capped_read.read_capped`.
`decode_content` undoes the content codings of a body the gateway must read itself (an error
body for the rules, an MCP request for its JSON-RPC messages); what is forwarded stays the
bytes as they were sent.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Callable
from enum import StrEnum
from typing import Any

from aiohttp import StreamReader


class BodyTooLarge(Exception):
    """The client's body passed `limits.max_request_body_bytes`."""


class BodyStalled(Exception):
    """The client stopped sending its body for longer than `request_body_timeout_s`."""


class RequestBody:
    """The client's body as an async iterable of chunks, replayable while it stays small.

    Up to `keep_bytes` of it are kept as they pass, so that when a reused upstream connection
    turns out to be dead before any answer the upstream client can send the same bytes again
    on a fresh one (`replayable`). A second iteration yields the kept chunks, then reads on
    from the client where the first stopped. Over `keep_bytes` nothing is kept: a large body
    is streamed once and never replayed.
    """

    def __init__(
        self,
        stream: StreamReader,
        max_bytes: int,
        stall_timeout_s: float,
        on_end: Callable[[], None] | None = None,
        digest: Any = None,
        keep_bytes: int = 0,
    ) -> None:
        self._stream = stream
        self._max_bytes = max_bytes
        self._stall_timeout_s = stall_timeout_s
        self.on_end = on_end
        """Called once the body has been read whole (the response deadline starts then)."""
        self._digest = digest  # a hashlib object fed every chunk (follow-up tracking)
        self._keep_bytes = keep_bytes
        self._kept: list[bytes] | None = [] if keep_bytes > 0 else None
        self._total = 0
        self._ended = False
        self.failure: BodyTooLarge | BodyStalled | None = None

    @property
    def replayable(self) -> bool:
        """Every byte taken from the client so far is kept, and the client's body is sound."""
        return self._kept is not None and self.failure is None

    @property
    def untouched(self) -> bool:
        """Not a byte of the body was read from the client."""
        return self._total == 0 and not self._ended

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.chunks()

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in tuple(self._kept or ()):  # a replay: what an earlier attempt took
            yield chunk
        while not self._ended:
            try:
                async with asyncio.timeout(self._stall_timeout_s):
                    chunk = await self._stream.readany()
            except TimeoutError:
                self.failure = BodyStalled()
                raise self.failure from None
            if not chunk:
                self._ended = True
                if self.on_end is not None:
                    self.on_end()
                return
            if self._digest is not None:
                self._digest.update(chunk)
            self._total += len(chunk)
            if self._total > self._max_bytes:
                self.failure = BodyTooLarge()
                raise self.failure
            if self._kept is not None:
                if self._total <= self._keep_bytes:
                    self._kept.append(chunk)
                else:
                    self._kept = None
            yield chunk


class Undecodable(StrEnum):
    """Why a body's content codings could not be undone."""

    UNSUPPORTED = "unsupported"  # a coding the gateway does not read (br, zstd, compress, …)
    CORRUPT = "corrupt"  # cut short, or not valid in the coding it names
    TOO_LARGE = "too_large"  # it decodes to more than the cap allows


DECODABLE = ("gzip", "x-gzip", "deflate")
"""The codings the gateway can undo, besides `identity` (zlib, in the standard library)."""
ACCEPT_ENCODING = "gzip, deflate"
"""The same, as an `Accept-Encoding` value (x-gzip is gzip's old alias)."""


def decode_content(body: bytes, content_encoding: str, cap: int) -> bytes | Undecodable:
    """`body` with every coding named in `content_encoding` undone, never more than `cap` bytes.

    Codings are listed in the order they were applied (RFC 9110 §8.4), so they are undone
    last first; the cap holds at every step, so a small body cannot inflate into a large one
    on the way. Every gzip member is decoded (RFC 1952 allows several, and a client decodes
    them all); stopping after the first would let a rewrite drop the rest of the body.
    """
    out = body
    for coding in reversed([c.strip().lower() for c in content_encoding.split(",")]):
        if coding in ("", "identity"):
            continue
        if coding not in DECODABLE:
            return Undecodable.UNSUPPORTED
        decoded = _inflate(out, coding, cap)
        if isinstance(decoded, Undecodable):
            return decoded
        out = decoded
    return out


def decoded_for_matching(body: bytes, content_encoding: str, cap: int) -> bytes | None:
    """An error body as the rules should see it, or None when it cannot be decoded within
    `cap`: the body then passes unchanged."""
    decoded = decode_content(body, content_encoding, cap)
    return None if isinstance(decoded, Undecodable) else decoded


def _inflate(body: bytes, coding: str, cap: int) -> bytes | Undecodable:
    gzip = coding != "deflate"
    wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
    if not gzip and not _has_zlib_header(body):
        wbits = -zlib.MAX_WBITS  # raw deflate, which many servers send for "deflate"
    out = b""
    rest = body
    try:
        while rest:
            inflater = zlib.decompressobj(wbits)
            out += inflater.decompress(rest, cap + 1 - len(out))
            if len(out) > cap or inflater.unconsumed_tail:
                return Undecodable.TOO_LARGE
            if not inflater.eof:
                return Undecodable.CORRUPT
            rest = inflater.unused_data if gzip else b""
    except zlib.error:
        return Undecodable.CORRUPT
    return out


def _has_zlib_header(body: bytes) -> bool:
    """RFC 1950: method 8 in the low nibble, and the two header bytes a multiple of 31."""
    return len(body) >= 2 and body[0] & 0x0F == 8 and ((body[0] << 8) | body[1]) % 31 == 0
