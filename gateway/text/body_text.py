"""An error body as text: decoded the way its sender meant it, or not at all.

Additive mode inserts members into the upstream's JSON and must give back the upstream's
bytes around them (docs/transparency.md, Additive mode). So the body is decoded with what it
declares: a byte order mark first (as RFC 8259 decoders do), else the `charset` of its
Content-Type, else UTF-8; strictly, and only when encoding the text again gives the same
bytes. Anything else is `None`: the body then passes untouched.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

# Longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Without a mark, UTF-16 and UTF-32 are big-endian (RFC 2781 §4.3), not the host's order.
_UNMARKED = {"utf-16": "utf-16-be", "utf-32": "utf-32-be"}
_CHARSET = re.compile(r";\s*charset\s*=\s*\"?([^\";\s]+)", re.IGNORECASE)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


@dataclass(frozen=True, slots=True)
class BodyText:
    """A body's text, the codec that gives back its bytes, and its byte order mark."""

    text: str
    encoding: str
    bom: bytes = b""

    def offset(self, position: int) -> int:
        """The byte offset in the body of a position in `text`."""
        if self.encoding == "utf-8" and self.text.isascii():
            return len(self.bom) + position
        return len(self.bom) + len(self.text[:position].encode(self.encoding))

    def encode_json(self, piece: str) -> bytes:
        """JSON text in this body's encoding; characters it cannot hold as `\\u` escapes."""
        try:
            return piece.encode(self.encoding)
        except UnicodeEncodeError:
            return _NON_ASCII.sub(_escape, piece).encode(self.encoding)


def declared_charset(content_type: str) -> str | None:
    """The `charset` parameter of a Content-Type, lower-cased, or None."""
    match = _CHARSET.search(content_type)
    return match.group(1).lower() if match else None


def body_text(body: bytes, content_type: str) -> BodyText | None:
    """The body decoded as declared, or None when it cannot be decoded and encoded back."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return _decoded(body, encoding, bom)
    charset = declared_charset(content_type) or "utf-8"
    try:
        encoding = codecs.lookup(charset).name
    except LookupError:
        return None
    return _decoded(body, _UNMARKED.get(encoding, encoding), b"")


def declared_text(body: bytes, content_type: str) -> str:
    """The body as text for reading: as declared, else UTF-8 with invalid bytes replaced."""
    declared = body_text(body, content_type)
    return declared.text if declared is not None else body.decode("utf-8", "replace")


def _decoded(body: bytes, encoding: str, bom: bytes) -> BodyText | None:
    raw = body[len(bom) :]
    try:
        text = raw.decode(encoding)
        # UTF-8 decoded strictly always encodes back; other codecs must show that they do.
        if encoding != "utf-8" and text.encode(encoding) != raw:
            return None
    except (UnicodeError, LookupError):
        return None
    return BodyText(text, encoding, bom)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
