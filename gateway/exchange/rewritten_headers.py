"""Which upstream headers a rewritten body keeps (docs/transparency.md, Rewritten bodies).

When the gateway replaces a response's body (an envelope, an additive body, an upgraded MCP
message), a header goes only when the new bytes make it wrong: the framing and coding of the
old bytes, and validators computed over them. Headers that describe the resource rather than
these bytes stay: a 416's `Content-Range: bytes */1000` gives the resource's length, and
`Accept-Ranges` says what the resource accepts. Every header not named here passes as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from multidict import CIMultiDict

PARTIAL_CONTENT = 206
RANGE_NOT_SATISFIABLE = 416


@dataclass(frozen=True, slots=True)
class BodyHeader:
    """A response header about the body, and whether a rewrite keeps it (and why)."""

    name: str
    kept: bool
    why: str
    unless: frozenset[int] = frozenset()
    """Statuses on which the opposite holds (a 416's ETag is the resource's)."""

    def keeps(self, status: int) -> bool:
        return self.kept != (status in self.unless)


BODY_HEADERS = (
    BodyHeader("Content-Length", False, "the length of the old bytes; the gateway frames anew"),
    BodyHeader("Content-Encoding", False, "the old bytes' coding; a rewrite is sent decoded"),
    BodyHeader(
        "ETag",
        False,
        "a validator of the old bytes (Express tags every body it sends); on a 416 it is "
        "the resource's, which If-Range compares, so kept there",
        frozenset({RANGE_NOT_SATISFIABLE}),
    ),
    BodyHeader("Content-MD5", False, "a checksum of the old bytes"),
    BodyHeader("Digest", False, "a checksum of the old bytes (RFC 3230)"),
    BodyHeader("Content-Digest", False, "a checksum of the old bytes (RFC 9530)"),
    BodyHeader("Repr-Digest", False, "a checksum of the old representation (RFC 9530)"),
    BodyHeader(
        "Content-Range",
        True,
        "on a 416 it gives the resource's length (`bytes */1000`), not a range of this body; "
        "on a rewritten 206 it would frame the new body as a part, so dropped there",
        frozenset({PARTIAL_CONTENT}),
    ),
    BodyHeader("Accept-Ranges", True, "what the resource accepts, not a property of this body"),
)


def drop_body_bound(headers: CIMultiDict[str], status: int) -> None:
    """Remove from a rewritten response's headers what the new body makes wrong."""
    for header in BODY_HEADERS:
        if not header.keeps(status):
            headers.popall(header.name, None)
