"""Compiling the small languages inside rules: regexes, path globs and status specs.

Validation and classification both need these compiled; the cache means each pattern is
compiled once per process however many rules or reloads share it.
"""

from __future__ import annotations

import functools
import string
from typing import Any

import regex

from gateway.config.prefilter import Needles, may_match, required_words

Pattern = Any  # regex.Pattern; the regex module ships no type stubs


# A pattern with none of these (and no whitespace, which the VERBOSE flag could change) is
# a plain substring: `json`, `html`, `xml`, the header tests most rules start with.
_METACHARACTERS = frozenset("\\.^$*+?{}[]|()#") | frozenset(" \t\n\r\f\v")


class LiteralPattern:
    """A regex without metacharacters, searched as a substring.

    Same answers as the `regex` module for such a pattern, without its per-search timeout
    set-up (about 5 µs, most of what a header test costs): the stack packs put dozens of
    rules that begin with a Content-Type test in front of every status. A substring search
    is linear, so it needs no timeout.
    """

    __slots__ = ("pattern",)
    groupindex: dict[str, int] = {}  # noqa: RUF012 - shared and never written

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def search(self, text: str, timeout: float | None = None) -> LiteralMatch | None:
        return _LITERAL_MATCH if self.pattern in text else None


class LiteralMatch:
    """What a `LiteralPattern` found: no groups to capture."""

    __slots__ = ()

    def groupdict(self) -> dict[str, str]:
        return {}


_LITERAL_MATCH = LiteralMatch()


class PrefilteredPattern:
    """A regex searched only in a text holding one of the words any match contains
    (`gateway.config.prefilter`): a text without them costs a substring test, not a timed
    search. A pattern whose words are not known (`needles` None) is always searched.

    Both the words and the compiled pattern are worked out the first time a search (or a
    name the compiled pattern has, such as `groupindex`) needs them, once per process: the
    `regex` module and the prefilter parse a pattern in Python, and the shipped packs' 90
    patterns cost every gateway start about 45 ms of CPU when compiled up front, most of them
    for rules no request of that process reaches. A user's pattern is still compiled when the
    config loads, by the validation that reports its `FILE:LINE` (`validate.rule_problems`).
    """

    __slots__ = ("_compiled", "_needles", "_read", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: Pattern = None
        self._needles: Needles | None = None
        self._read = False  # `_needles` is known

    @property
    def compiled(self) -> Pattern:
        """The `regex` module's pattern; raises `regex.error` if it does not compile."""
        if self._compiled is None:
            self._compiled = regex.compile(self.pattern)
        return self._compiled

    @property
    def needles(self) -> Needles | None:
        """The words one of which every match contains; None when not known."""
        if not self._read:
            self._needles, self._read = required_words(self.pattern), True
        return self._needles

    def may_match(self, text: str) -> bool:
        """False when the pattern cannot match `text` (no search needed to know it)."""
        needles = self.needles
        return needles is None or may_match(needles, text)

    def search(self, text: str, timeout: float | None = None) -> Any:
        if not self.may_match(text):
            return None
        return self.compiled.search(text, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled, name)


@functools.lru_cache(maxsize=65536)
def compile_regex(pattern: str) -> Pattern:
    """A pattern searched as the `regex` module searches it (with match timeouts).

    A pattern without metacharacters becomes a `LiteralPattern`; any other a
    `PrefilteredPattern`, compiled (and raising `regex.error`) when first used.
    """
    if pattern and _METACHARACTERS.isdisjoint(pattern):
        return LiteralPattern(pattern)
    return PrefilteredPattern(pattern)


@functools.lru_cache(maxsize=16384)
def compile_glob(glob: str, separator: str = "/") -> Pattern:
    """Translate a glob: `**` spans separators, `*` and `?` do not; everything else literal.

    With an empty `separator` (tool names), `*` spans everything.
    """
    sep = regex.escape(separator) if separator else ""
    star, one = (f"[^{sep}]*", f"[^{sep}]") if sep else (".*", ".")
    out: list[str] = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append(star)
            i += 1
        elif char == "?":
            out.append(one)
            i += 1
        else:
            out.append(regex.escape(char))
            i += 1
    return regex.compile("".join(out) + r"\Z", regex.DOTALL)


def parse_status(spec: int | str) -> tuple[int, int]:
    """`404` → (404, 404); `"5xx"` → (500, 599); `"500-504"` → (500, 504). ValueError if bad."""
    if isinstance(spec, bool):
        raise ValueError(f"{spec!r} is not a status")
    if isinstance(spec, int):
        low = high = spec
    else:
        text = spec.strip().lower()
        if len(text) == 3 and text.endswith("xx") and text[0].isdigit():
            low, high = int(text[0]) * 100, int(text[0]) * 100 + 99
        elif "-" in text:
            left, _, right = text.partition("-")
            if not (left.strip().isdigit() and right.strip().isdigit()):
                raise ValueError(f"{spec!r} is not a status, 'Nxx' class or 'LOW-HIGH' range")
            low, high = int(left), int(right)
        elif text.isdigit():
            low = high = int(text)
        else:
            raise ValueError(f"{spec!r} is not a status, 'Nxx' class or 'LOW-HIGH' range")
    if not (100 <= low <= high <= 599):
        raise ValueError(f"{spec!r} must lie within 100-599 with LOW <= HIGH")
    return low, high


def placeholders(template: str) -> set[str]:
    """The `{name}` placeholders of a template (`message`, `fix_required`, `suggestion`;
    `{{` and `}}` are literal braces). ValueError for what `str.format_map` would refuse at
    the first failure instead of filling: a lone brace, a conversion or format spec."""
    names: set[str] = set()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"{exc}: write a literal brace twice ({{{{ or }}}})") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"{{{name}...}}: a placeholder is a name alone, with no ! or :")
        names.add(name)
    return names
