"""Undoing the content codings of a body the gateway must read itself (an error body for the
rules, an MCP request for its JSON-RPC messages), never past a cap; what is forwarded stays
the bytes as they were sent.
"""

from __future__ import annotations

import zlib
from enum import StrEnum


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
