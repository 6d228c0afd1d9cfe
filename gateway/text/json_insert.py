"""Inserting members into a JSON object's text without re-writing what is already there.

Parsing a JSON object and serialising it again changes what the sender wrote: `1e400` becomes
`Infinity` (not JSON), `12345678901234567890.5` loses digits, `1.10` becomes `1.1`, duplicate
keys collapse. Additive mode may only add (docs/spec.md, `additive`), so this finds where an
object's members are in the text, with the json module's own scanner, and inserts new members
after the last one. The text is checked strictly on the way: a body that is not one JSON object
(NaN and Infinity are not JSON) is not touched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.fence.cpython_private import scanstring

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SPACES = frozenset(" \t\n\r")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Strict: refuses NaN/Infinity and raw control characters in strings. Numbers stay text: their
# values are not needed, and a 5000-digit integer is valid JSON that int() would refuse.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=str, parse_float=str)


@dataclass(frozen=True, slots=True)
class Member:
    """One `"name": value` of an object: its decoded name and where its value's text is."""

    name: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class ObjectText:
    """Where an object's members are in a text, and where new members go (`tail`): after
    the last member's value, or after `{` when it has none."""

    members: tuple[Member, ...]
    tail: int

    def names(self) -> frozenset[str]:
        return frozenset(m.name for m in self.members)

    def last(self, name: str) -> Member | None:
        """The member a parser keeps when a name repeats: the last one."""
        for member in reversed(self.members):
            if member.name == name:
                return member
        return None


def scan_document(text: str) -> ObjectText | None:
    """The object that is the whole of `text`, or None when `text` is not one JSON object."""
    try:
        found, end = _scan_object(text, _skip(text, 0))
    except (ValueError, RecursionError):
        return None
    return found if _skip(text, end) == len(text) else None


def scan_object_at(text: str, start: int) -> ObjectText | None:
    """The object whose `{` is at `start` (a member value `scan_document` already checked)."""
    try:
        return _scan_object(text, start)[0]
    except (ValueError, RecursionError):
        return None


def members_text(found: ObjectText, additions: Sequence[tuple[str, Any]]) -> str:
    """The text to insert at `found.tail` to add `additions`, compact, in order."""
    if not additions:
        return ""
    lead = "," if found.members else ""
    return lead + _COMPACT.encode(dict(additions))[1:-1]


def _scan_object(text: str, start: int) -> tuple[ObjectText, int]:
    """The members of the object whose `{` is at `start`, and the index after its `}`."""
    if not text.startswith("{", start):
        raise ValueError("not an object")
    tail = start + 1
    index = _skip(text, tail)
    members: list[Member] = []
    if text.startswith("}", index):
        return ObjectText((), tail), index + 1
    while True:
        if not text.startswith('"', index):
            raise ValueError("expected a member name")
        name, index = scanstring(text, index + 1, True)
        index = _skip(text, index)
        if not text.startswith(":", index):
            raise ValueError("expected ':'")
        value_start = _skip(text, index + 1)
        _, value_end = _DECODER.raw_decode(text, value_start)
        members.append(Member(name, value_start, value_end))
        index = _skip(text, value_end)
        if text.startswith(",", index):
            index = _skip(text, index + 1)
            continue
        if text.startswith("}", index):
            return ObjectText(tuple(members), value_end), index + 1
        raise ValueError("expected ',' or '}'")


def _skip(text: str, index: int) -> int:
    if text[index : index + 1] not in _SPACES:  # compact JSON: most calls skip nothing
        return index
    match = _WHITESPACE.match(text, index)
    assert match is not None  # the pattern matches the empty string
    return match.end()
