"""The YAML the retrofit tools write: `init`'s starter, `suggest`'s drafts and fixtures, the
console's copies. Every value goes through PyYAML's emitter; every comment is one line.

What these files hold comes from traffic, a fleet store or an upstream's OpenAPI document: a
request path, a message, a route name, a header. Spliced into YAML by hand, such a value can
end a comment (YAML breaks lines at U+0085, U+2028 and U+2029 as well as at LF and CR) or a
flow sequence, and add rules of its sender's choosing to a file an operator includes
(docs/security.md#drafted-yaml). So a writer builds its document as data (`Mapping`,
`Sequence`, plain values), this module lays it out with comments, and `emit` returns text only
after loading it back, with the config loader and with PyYAML's pure-Python one, and finding
exactly that data: a value that could change the document raises `UnsafeYaml` instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from gateway.config.errors import ConfigError
from gateway.config.yamlsrc import parse_yaml

INDENT = "  "


class _Dumper(yaml.SafeDumper):
    """The safe dumper, writing a value met twice twice: the config loader refuses aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class UnsafeYaml(ValueError):
    """The text laid out does not load back as the document it was built from."""


@dataclass(frozen=True, slots=True)
class Comment:
    """A comment line of its own, before the entry or item that follows it."""

    text: str


@dataclass(frozen=True, slots=True)
class Noted:
    """A value written on one line with a comment after it (`code: X  # review: …`)."""

    value: Any
    note: str


@dataclass(slots=True)
class Mapping:
    """A block mapping: entries in order, comment lines between them."""

    entries: list[tuple[str, Any] | Comment] = field(default_factory=list)

    def add(self, key: str, value: Any) -> Mapping:
        self.entries.append((key, value))
        return self

    def note(self, text: str) -> Mapping:
        self.entries.append(Comment(text))
        return self


@dataclass(slots=True)
class Sequence:
    """A block sequence: items in order, comment lines between them."""

    items: list[Any] = field(default_factory=list)


def comment(text: str) -> str:
    """`text` as one comment line: every character that is not printable (line and paragraph
    separators, controls, bidi and other format characters) written as its escape, so no
    parser or editor can see a line break or a reordering in it."""
    return "# " + "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def flow(value: Any) -> str:
    """One value (a scalar, or a list or dict in flow style) as YAML on one line, as PyYAML's
    emitter quotes it. Readable Unicode stays as it is; a value whose text would carry a
    line break or another unprintable character is written with escapes instead."""
    for readable in (True, False):
        text = _dump(value, readable)
        text = text.removesuffix("\n...\n").removesuffix("\n")
        if "\n" in text:  # a multi-line string in a quoting style that folds: escape it
            text = _dump(value, readable, style='"').removesuffix("\n")
        if text.isprintable():
            return text
    raise UnsafeYaml(f"no one-line form for {value!r}")


def _dump(value: Any, readable: bool, style: str | None = None) -> str:
    text: str = yaml.dump(
        value,
        Dumper=_Dumper,
        default_flow_style=True,
        default_style=style,
        sort_keys=False,
        allow_unicode=readable,
        width=float("inf"),
    )
    return text


def data(node: Any) -> Any:
    """The plain data a node stands for: what loading the emitted text must give back."""
    if isinstance(node, Mapping):
        return {key: data(value) for key, value in _pairs(node)}
    if isinstance(node, Sequence):
        return [data(item) for item in node.items if not isinstance(item, Comment)]
    if isinstance(node, Noted):
        return node.value
    return node


def block(value: Any) -> Any:
    """Plain data as nodes: dicts, and lists that hold dicts or lists, in block style; a list
    of scalars stays one flow line (`status: [404]`)."""
    if isinstance(value, dict) and value:
        return Mapping([(str(key), block(item)) for key, item in value.items()])
    if isinstance(value, list) and any(isinstance(item, dict | list) for item in value):
        return Sequence([block(item) for item in value])
    return value


def emit(document: Mapping, header: tuple[str, ...] = ()) -> str:
    """The document as YAML text, under `header` comment lines; checked to load back as
    `data(document)`, else `UnsafeYaml`."""
    lines = [comment(text) for text in header]
    lines += _mapping(document, 0)
    text = "\n".join(lines) + "\n"
    verify(text, data(document))
    return text


def _pairs(node: Mapping) -> Iterator[tuple[str, Any]]:
    for entry in node.entries:
        if not isinstance(entry, Comment):
            yield entry


def _mapping(node: Mapping, depth: int) -> list[str]:
    pad = INDENT * depth
    lines: list[str] = []
    for entry in node.entries:
        if isinstance(entry, Comment):
            lines.append(pad + comment(entry.text))
            continue
        key, value = entry
        head = f"{pad}{flow(key)}:"
        if isinstance(value, Mapping) and any(True for _ in _pairs(value)):
            lines += [head, *_mapping(value, depth + 1)]
        elif isinstance(value, Sequence) and any(not isinstance(i, Comment) for i in value.items):
            lines += [head, *_sequence(value, depth + 1)]
        else:
            lines.append(f"{head} {_inline(value)}")
    return lines


def _sequence(node: Sequence, depth: int) -> list[str]:
    pad = INDENT * depth
    lines: list[str] = []
    for item in node.items:
        if isinstance(item, Comment):
            lines.append(pad + comment(item.text))
        elif isinstance(item, Mapping) and any(True for _ in _pairs(item)):
            nested = _mapping(item, depth + 1)
            first = next(n for n, line in enumerate(nested) if not line.lstrip().startswith("#"))
            nested[first] = pad + "- " + nested[first].lstrip()
            lines += nested
        elif isinstance(item, Sequence):
            lines.append(f"{pad}- {flow(data(item))}")
        else:
            lines.append(f"{pad}- {_inline(item)}")
    return lines


def _inline(value: Any) -> str:
    if isinstance(value, Noted):
        return f"{flow(value.value)}  {comment(value.note)}"
    return flow(data(value))


def verify(text: str, expected: Any) -> None:
    """`UnsafeYaml` unless both loaders read `text` back as `expected`: libyaml's (the
    config loader's, where PyYAML has it) and the pure-Python one, which differ on the
    rarest characters."""
    try:
        loaded = parse_yaml(text, "<written>").data
    except ConfigError as exc:
        raise UnsafeYaml(f"the text written is not YAML: {exc}") from None
    if loaded != expected or yaml.load(text, Loader=yaml.SafeLoader) != expected:
        raise UnsafeYaml("the text written does not load back as the document built")
