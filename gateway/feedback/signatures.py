"""The unmatched-errors report: which failures only a shipped default rule classified.

Each such failure is reduced to a signature — route, status and the upstream's message with
numbers, ids and quoted values masked — and counted in a bounded table (the space-saving
top-N algorithm: when full, the least-counted entry is replaced). `mendpoint gaps` prints the
top of it, so a team knows which rule to write next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import regex

from gateway.failure import Mode
from gateway.observers import Classified, FailureNotes

MAX_TEXT = 160
# The variable parts of a message (quoted values, ids, emails, numbers) and what each becomes;
# `mendpoint suggest` turns the same parts into captures.
VARIABLE_MASKS = (
    (regex.compile(r"\"[^\"]*\"|'[^']*'|`[^`]*`"), "'…'"),
    (
        regex.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
            r"[0-9a-fA-F]{12}\b"
        ),
        "<id>",
    ),
    (regex.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b"), "<email>"),
    (regex.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "<id>"),
    (regex.compile(r"\d+(?:[.:,-]\d+)*"), "#"),
)
# Whitespace runs become one space. Only runs that change are matched (two or more, or one
# that is not a space): replacing every single space by a space was a third of the cost.
_SPACES = regex.compile(r"\s{2,}|[^\S ]")
# The id and number masks (the last two) match only text with a digit; most messages, once
# their quoted values are masked, have none (docs/performance.md).
_DIGIT = regex.compile(r"\d")
_ALWAYS, _DIGITS = VARIABLE_MASKS[:3], VARIABLE_MASKS[3:]


@dataclass(frozen=True, slots=True)
class Signature:
    route: str
    status: str
    text: str


def normalise(message: str) -> str:
    """The message with its variable parts masked, so one kind of error is one signature."""
    text = message[: MAX_TEXT * 4]
    for pattern, replacement in _ALWAYS:
        text = pattern.sub(replacement, text)
    if _DIGIT.search(text) is not None:
        for pattern, replacement in _DIGITS:
            text = pattern.sub(replacement, text)
    text = str(_SPACES.sub(" ", text)).strip()
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class SignatureBook:
    """Approximate top-N counts in bounded memory."""

    def __init__(self, capacity: int = 200) -> None:
        self.capacity = capacity
        self._counts: dict[Signature, int] = {}
        self.shared: Callable[[Signature], None] | None = None
        """Told of every signature when a fleet store counts them too (gateway.feedback.shared)."""

    def record(self, route: str, status: str, message: str) -> None:
        signature = Signature(route, status, normalise(message))
        if self.shared is not None:
            self.shared(signature)
        if signature in self._counts:
            self._counts[signature] += 1
        elif len(self._counts) < self.capacity:
            self._counts[signature] = 1
        else:
            smallest = min(self._counts, key=self._counts.__getitem__)
            floor = self._counts.pop(smallest)
            self._counts[signature] = floor + 1

    def top(self, limit: int = 20) -> list[tuple[Signature, int]]:
        ranked = sorted(
            self._counts.items(),
            key=lambda item: (-item[1], item[0].route, item[0].status, item[0].text),
        )
        return ranked[:limit]

    def __len__(self) -> int:
        return len(self._counts)


class SignatureObserver:
    """The unmatched-errors report, as a declared observer of the failure path
    (gateway/observers.py): a failure only a shipped default named becomes a signature."""

    def __init__(self, book: SignatureBook) -> None:
        self.book = book

    def classified(self, event: Classified) -> None:
        if event.is_default:
            self.book.record(event.route, event.kind, event.failure.message)

    def upgraded(self, route: str, mode: Mode) -> None:
        pass

    def fell_back(self, route: str, reason: str, notes: FailureNotes | None) -> None:
        pass
