"""Request paths as routes read them: dot segments resolved, and every other reading checked.

The route table is the boundary when an upstream is reachable only through the gateway, so
a path must name the same route for the gateway as for whatever server reads it next. Servers
read paths differently (docs/transparency.md#paths): nginx and Envoy resolve `.` and `..`
after decoding `%2E`, nginx decodes `%2F` first and merges `//`, Tomcat drops `;name=value`
from a segment, IIS takes `\\` for `/`, Express ignores case. A path that means one route
to the gateway and another, or a place above the route's prefix, to such a server let
`/public/..%2fadmin` reach an admin area no route allowed, and `POST /MCP` skip an MCP
route's Origin check on its way to an Express server that serves `/mcp` for it.

So a path that needs it (one with `%`, `/.`, `\\`, `//` or `;`; a plain path takes one
fast check and nothing else) is read twice:

- **forwarded**: what the upstream is sent. Dot segments (also `%2E`-encoded) resolved as
  RFC 3986 §5.2.4 says, so no server resolves them differently after the gateway; encoded
  slashes and backslashes as the route's `path.escaped_slashes` says; `//` merged when
  `path.merge_slashes` is on; every other byte as the client sent it.
- **decoded**: the most any single server reads into it: every `%XX` decoded once, `\\`
  and the decoded `%2F`, `%5C` taken for `/`, `;params` dropped, `//` merged.

A segment that is a dot segment in a reading but not in the forwarded form (`..%2f`,
`%2e%2e%5c`, `..;x`, `..\\`) is refused: the gateway cannot know which reading the upstream
takes. So is a `..` that climbs above the root. The route table then checks that the
path as sent, the forwarded path and the decoded path all name the same route.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote_to_bytes

from gateway.config.route_model import DotSegments, EscapedSlashes

_ESCAPED_SLASHES = ("%2f", "%2F", "%5c", "%5C", "\\")


def is_plain(path: str) -> bool:
    """No character any reading could take for a separator, a dot segment or a parameter:
    the path means the same to every server, and is forwarded as it is."""
    return (
        "%" not in path
        and "/." not in path
        and "\\" not in path
        and "//" not in path
        and ";" not in path
    )


@dataclass(frozen=True, slots=True)
class PathRules:
    """A route's `path:` settings, as reading a path needs them."""

    dot_segments: DotSegments = "resolve"
    escaped_slashes: EscapedSlashes = "keep"
    merge_slashes: bool = False


DEFAULT_RULES = PathRules()


class Readings(NamedTuple):
    """The two readings of a path that needed them (the query is not part of either); a
    named tuple, the cheapest immutable record, since every such path builds one."""

    forwarded: str
    decoded: str


def read(path: str, rules: PathRules) -> Readings | None:
    """The path forwarded and decoded; None when it must be refused: it climbs above the
    root in some reading, it hides a dot segment another server would find, or `rules`
    refuse its form."""
    if rules.escaped_slashes != "keep" and any(s in path for s in _ESCAPED_SLASHES):
        if rules.escaped_slashes == "refuse":
            return None
        for escaped in _ESCAPED_SLASHES:
            path = path.replace(escaped, "/")
    segments = path[1:].split("/")
    dots: list[str | None] = []
    parts: list[str] = []  # the decoded reading's segments, `//` merged
    for segment in segments:
        dot = _dot_segment(segment)
        dots.append(dot)
        if dot is not None:
            parts.append(dot)
        elif "%" in segment or "\\" in segment or ";" in segment:
            pieces = _parts(segment)
            if "." in pieces or ".." in pieces:
                return None  # a dot segment to the server that decodes it, not to RFC 3986
            parts.extend(piece for piece in pieces if piece)
        elif segment:
            parts.append(segment)
    if rules.dot_segments == "refuse" and any(dots):
        return None
    if any(dots) or rules.merge_slashes:
        forwarded = _remove_dot_segments(segments, dots, rules.merge_slashes)
        if forwarded is None:
            return None
        # The decoded reading merges `//` before it resolves, as nginx does: `/a//../b` is
        # `/b` to it and `/a/b` to RFC 3986, and both must name the same route.
        decoded = _remove_dot_segments(parts, [p if p in (".", "..") else None for p in parts])
        if decoded is None:
            return None
        return Readings("/" + "/".join(forwarded), "/" + "/".join(decoded))
    # No dot segment: forwarded as it is (a part of the decoded reading is never a dot
    # segment here, since a segment hiding one was refused above).
    return Readings(path, "/" + "/".join(parts))


def _remove_dot_segments(
    segments: list[str], dots: list[str | None], merge: bool = False
) -> list[str] | None:
    """RFC 3986 §5.2.4 over a path's segments (`dots[i]`: segment i is `.` or `..`);
    None when a `..` climbs above the root, where nothing is left for it to resolve to."""
    kept: list[str] = []
    last = len(segments) - 1
    for index, (segment, dot) in enumerate(zip(segments, dots, strict=True)):
        if dot is None:
            if segment or index == last or not merge:
                kept.append(segment)
            continue
        if dot == "..":
            if not kept:
                return None
            kept.pop()
        if index == last:
            kept.append("")  # `/a/b/..` is `/a/`, a directory
    return kept


def _dot_segment(segment: str) -> str | None:
    """`.` or `..` when the segment is one (`%2E` decoded, in either case), else None."""
    if not segment or len(segment) > 6 or segment.strip(".%2eE"):
        return None
    plain = segment.replace("%2e", ".").replace("%2E", ".")
    return plain if plain in (".", "..") else None


def _parts(segment: str) -> list[str]:
    """The segment as the most-decoding server reads it: decoded once, split at slashes and
    backslashes, each part without its `;params`."""
    decoded = percent_decode(segment).replace("\\", "/")
    return [part.partition(";")[0] for part in decoded.split("/")]


def percent_decode(text: str) -> str:
    """Every valid `%XX` as the character of that byte (a malformed one stays as it is):
    one code point per byte, so that separators and dots are found whatever the bytes
    around them are."""
    return unquote_to_bytes(text).decode("latin-1") if "%" in text else text
