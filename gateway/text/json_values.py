"""How many values a JSON text holds, known before it is parsed: a bound read off its bytes.

Parsing builds an object per value: a gzip body of 11 KiB held four million empty objects
and cost a gateway 300 MiB and seconds of its event loop (docs/security.md#mcp-bodies). A
valid JSON text holds at most 1 + (its commas) + (its `{` and `[`) values outside its
strings: each container's members but the first follow a comma, and each container and the
text itself is one (an empty container counts one value too many: a bound, not a count). So
the count of those bytes bounds the values, without building any; where the bytes inside
strings push the plain count over a limit, the strings are dropped and the bytes counted
again, so a long argument full of commas costs nothing it should not.
"""

from __future__ import annotations

import re

STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
"""A JSON string: its two alternatives are disjoint, so a match never backtracks."""


def _structure(data: bytes) -> int:
    return 1 + data.count(b",") + data.count(b"{") + data.count(b"[")


def values_at_most(data: bytes, limit: int) -> bool:
    """Whether the JSON text `data` holds at most `limit` values (keys not counted: each
    key goes with the value after it). Linear in `data`; an invalid text is bounded the
    same way, and its parse fails anyway."""
    if _structure(data) <= limit:
        return True
    if b'"' not in data:
        return False
    return _structure(STRINGS.sub(b'""', data)) <= limit
