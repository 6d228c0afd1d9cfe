"""The path language of `json:` conditions, `fields:` and `message_paths` (docs/rules.md).

A path is dotted; a numeric segment indexes a list (`detail.0.msg`). Frameworks put the
messages an agent needs in lists (FastAPI's `detail[].msg`) and under keys that name the
field (DRF's and ASP.NET's `{field: [messages]}`), so a segment may also be a wildcard:
`*` (or `[*]`) visits every list item or every value of an object, and `{name}` does the
same while binding the key (or list index) it visited to the capture `name`.

    detail[*].msg          every message of a FastAPI 422
    errors.{field}[*]      every message of an ASP.NET ValidationProblemDetails, with its key

Parsing happens once at load (`parse_json_path` raises ValueError with a readable reason);
`JsonPath.find` walks a parsed body and visits at most `MAX_VISITS` nodes, so a hostile
body of a million list items costs a bounded amount of work.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_VISITS = 2000


@dataclass(frozen=True, slots=True)
class Wild:
    """A wildcard step; `name` is the capture bound to the visited key or index, if any."""

    name: str | None = None


Step = str | int | Wild
Bindings = dict[str, str]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SEGMENT = re.compile(r"([^.\[\]]*)((?:\[[^\[\]]*\])*)\Z")


@dataclass(frozen=True, slots=True)
class JsonPath:
    text: str
    steps: tuple[Step, ...]
    literal: bool
    """True when the path has no wildcard: it names at most one value (a plain lookup)."""

    @property
    def names(self) -> frozenset[str]:
        """The captures its `{name}` wildcards bind."""
        return frozenset(s.name for s in self.steps if isinstance(s, Wild) and s.name)

    def get(self, value: Any) -> Any:
        """The first value the path reaches, or None (a literal path reaches at most one)."""
        if self.literal:
            return _get(value, self.steps)
        for found, _ in self.find(value):
            return found
        return None

    def find(self, value: Any) -> Iterator[tuple[Any, Bindings]]:
        """Every non-null value the path reaches, in document order, with its bindings."""
        for found, bound, _ in _walk(value, self.steps, {}, (), [MAX_VISITS]):
            yield found, bound

    def find_keyed(self, value: Any) -> Iterator[tuple[Any, tuple[str, ...]]]:
        """Like `find`, yielding instead the object keys its wildcards visited, in order.

        `errors.*[*]` over `{"errors": {"name": ["blank"]}}` yields `("blank", ("name",))`:
        the keys are what names a field when the body keys its messages by field.
        """
        for found, _, keys in _walk(value, self.steps, {}, (), [MAX_VISITS]):
            yield found, keys


def _get(value: Any, steps: tuple[Step, ...]) -> Any:
    current = value
    for step in steps:
        current = _child(current, step)
        if current is None:
            return None
    return current


def _child(value: Any, step: str | int | Wild) -> Any:
    if isinstance(value, dict):
        return value.get(str(step))
    if isinstance(value, list) and isinstance(step, int):
        return value[step] if -len(value) <= step < len(value) else None
    return None


def _walk(
    value: Any,
    steps: tuple[Step, ...],
    bound: Bindings,
    keys: tuple[str, ...],
    budget: list[int],
) -> Iterator[tuple[Any, Bindings, tuple[str, ...]]]:
    """Depth-first over `steps`; `budget` (one shared counter) bounds the nodes visited."""
    budget[0] -= 1
    if budget[0] < 0 or value is None:
        return
    if not steps:
        yield value, bound, keys
        return
    step, rest = steps[0], steps[1:]
    if not isinstance(step, Wild):
        yield from _walk(_child(value, step), rest, bound, keys, budget)
        return
    items: Any
    if isinstance(value, dict):
        items = ((str(k), v, True) for k, v in value.items())
    elif isinstance(value, list):
        items = ((str(i), v, False) for i, v in enumerate(value))
    else:
        return
    for key, child, is_key in items:
        if budget[0] < 0:
            return
        binding = {**bound, step.name: key} if step.name else bound
        yield from _walk(child, rest, binding, (*keys, key) if is_key else keys, budget)


@functools.lru_cache(maxsize=4096)
def parse_json_path(text: str) -> JsonPath:
    """`"errors.{field}[*]"` → its steps; ValueError naming what is wrong."""
    if not text or text.strip() != text:
        raise ValueError(f"{text!r} is not a JSON path (empty, or spaces around it)")
    steps: list[Step] = []
    for segment in text.split("."):
        found = _SEGMENT.match(segment)
        if found is None or not segment:
            raise ValueError(
                f"{text!r}: segment {segment!r} is not a key, an index, '*', '{{name}}' "
                "or one of those followed by [index], [*] or [{name}]"
            )
        head, brackets = found.group(1), found.group(2)
        if head:
            steps.append(_step(head, text))
        elif not brackets:
            raise ValueError(f"{text!r}: empty segment")
        for inner in re.findall(r"\[([^\[\]]*)\]", brackets):
            step = _step(inner, text)
            if isinstance(step, str):
                raise ValueError(f"{text!r}: [{inner}] must be an index, [*] or [{{name}}]")
            steps.append(step)
    names = [s.name for s in steps if isinstance(s, Wild) and s.name]
    if len(names) != len(set(names)):
        raise ValueError(f"{text!r}: a capture name is bound twice")
    literal = not any(isinstance(step, Wild) for step in steps)
    return JsonPath(text, tuple(steps), literal)


def _step(token: str, text: str) -> Step:
    if token == "*":
        return Wild()
    if token.startswith("{") and token.endswith("}"):
        name = token[1:-1]
        if not _NAME.match(name):
            raise ValueError(f"{text!r}: {token} must name a capture (letters, digits, _)")
        return Wild(name)
    if "{" in token or "}" in token or "*" in token:
        raise ValueError(f"{text!r}: {token!r} mixes a wildcard with a key")
    if token.lstrip("-").isdigit():
        return int(token)
    return token


__all__ = ["MAX_VISITS", "Bindings", "JsonPath", "Wild", "parse_json_path"]
