"""The literal text a regex cannot match without: a substring test before the timed search.

A rule's regex runs under a timeout (docs/rules.md), and in the `regex` module that costs two
CPU-clock system calls per search: about 1.7 µs against 0.3 µs without, most of a search
that fails on a short text. Most rule patterns name a word the text must hold (`\\bENOENT\\b`,
`(?i)input validation error`); where the text holds none of a pattern's required words, the
search cannot match and is not run (docs/performance.md).

The words are read from the pattern's parse by Python's own `re` parser, and only where that
parse means the same as the `regex` module's: a pattern `re` does not parse (the `regex`
module's own syntax: `\\p{..}`, fuzzy `{e<=1}`, `(?V1)`, named lists, ...), or with a brace
that is not a plain repeat, gets no prefilter and is always searched. Under IGNORECASE only
ASCII words are kept, and they are tested only on ASCII text: Unicode case folding (the
Kelvin sign matches `k`) never makes a skipped search one that would have matched.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

from gateway.fence.cpython_private import sre_constants, sre_parse

# A brace that opens a plain repeat (`{3}`, `{1,128}`, `{,4}`); any other brace may be the
# `regex` module's own syntax, which `re` would read as literal text.
_REPEAT = re.compile(r"\{\d*,?\d*\}")
_FLAGS_OK = sre_constants.SRE_FLAG_IGNORECASE | sre_constants.SRE_FLAG_VERBOSE
_FLAGS_OK |= sre_constants.SRE_FLAG_DOTALL | sre_constants.SRE_FLAG_MULTILINE
_FLAGS_OK |= sre_constants.SRE_FLAG_UNICODE
_IGNORECASE = sre_constants.SRE_FLAG_IGNORECASE
_MIN_WORD = 3  # a shorter word rules out too little to be worth a test


@dataclass(frozen=True, slots=True)
class Needle:
    """A word a match contains: as written, or (`folded`) ASCII compared lower-cased."""

    word: str
    folded: bool


Needles = tuple[Needle, ...]
"""Any one of these is in every text the pattern matches."""


def required_words(pattern: str) -> Needles | None:
    """Words at least one of which any match of `pattern` contains; None when not known."""
    if "{" in _REPEAT.sub("", pattern):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return None
    flags = parsed.state.flags
    if flags & ~_FLAGS_OK:
        return None
    return _sequence(list(parsed), bool(flags & _IGNORECASE))


def _sequence(items: list[Any], folded: bool) -> Needles | None:
    """The best requirement of one sequence: its longest literal run or required part."""
    best: Needles | None = None
    run: list[str] = []

    def keep(found: Needles | None) -> None:
        nonlocal best
        if found is not None and (best is None or _strength(found) > _strength(best)):
            best = found

    def close_run() -> None:
        if len(run) >= _MIN_WORD:
            keep((Needle("".join(run).lower() if folded else "".join(run), folded),))
        run.clear()

    for op, arg in items:
        if op is sre_constants.LITERAL and (not folded or arg < 0x80):
            run.append(chr(arg))
            continue
        close_run()
        keep(_node(op, arg, folded))
    close_run()
    return best


def _node(op: Any, arg: Any, folded: bool) -> Needles | None:
    """What one non-literal item requires of every match (None: nothing known)."""
    c = sre_constants
    if op is c.SUBPATTERN:
        _, add, remove, body = arg
        if (add | remove) & ~_FLAGS_OK:
            return None
        inner = (folded or bool(add & _IGNORECASE)) and not remove & _IGNORECASE
        return _sequence(list(body), inner)
    if op is c.ATOMIC_GROUP:
        return _sequence(list(arg), folded)
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
        low, _, body = arg
        return _sequence(list(body), folded) if low >= 1 else None
    if op is c.ASSERT:  # a positive lookaround: its text is in the text searched too
        return _sequence(list(arg[1]), folded)
    if op is c.BRANCH:
        branches = [_sequence(list(b), folded) for b in arg[1]]
        if any(b is None for b in branches):
            return None
        return tuple(n for b in branches if b is not None for n in b)
    return None


def _strength(needles: Needles) -> int:
    """A requirement rules out more text the longer its shortest word is."""
    return min(len(n.word) for n in needles)


def may_match(needles: Needles, text: str) -> bool:
    """False only when the text holds none of the words (so the pattern cannot match)."""
    lowered: str | None = None
    for needle in needles:
        if not needle.folded:
            if needle.word in text:
                return True
            continue
        if lowered is None:
            if not text.isascii():
                return True  # Unicode case folding: leave it to the search
            lowered = text.lower()
        if needle.word in lowered:
            return True
    return False
