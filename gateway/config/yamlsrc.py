"""YAML parsing that remembers where every value came from.

PyYAML lets a duplicate key silently override the first and expands anchors into shared
objects; for a rule file both hide mistakes (a second `fix_command:` would win unnoticed).
This module parses with the safe loader's node tree, refuses duplicates and anchors/aliases,
and records the line of every mapping key and sequence item so later validation errors can
name `FILE:LINE`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from gateway.config.errors import ConfigError, Problem

Path = tuple[str | int, ...]


@dataclass(slots=True)
class YamlDoc:
    """Plain Python data plus a map from data path to 1-based source line."""

    file: str
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None


MAX_FILE_BYTES = 8 << 20

FAST_LOADER: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None)
"""libyaml's parser, where PyYAML was built with it: about five times faster than the pure
Python one, which took 80% of loading the shipped packs, the most of what `mendpoint stdio`
spent before its first answer (docs/performance.md#mcp-start-up)."""


def parse_yaml(text: str, file: str) -> YamlDoc:
    """Parse one YAML document; raise `ConfigError` for syntax, duplicates or anchors.

    libyaml reads the text when it is there; a text it refuses is read again by the pure
    Python parser, whose error (its words, its line) is the one every message has used.
    """
    try:
        node = _checked_node(text, file, FAST_LOADER or yaml.SafeLoader)
    except yaml.YAMLError as exc:
        if FAST_LOADER is None:
            raise _syntax_error(exc, text, file) from None
        try:
            node = _checked_node(text, file, yaml.SafeLoader)
        except yaml.YAMLError as again:
            raise _syntax_error(again, text, file) from None
    doc = YamlDoc(file=file, data=None)
    if node is None or node.tag == "tag:yaml.org,2002:null":  # empty, or just `---`
        doc.data = {}
        return doc
    problems: list[Problem] = []
    try:
        doc.data = _build(node, (), doc, problems, yaml.SafeLoader(""))
    except RecursionError:
        raise ConfigError.single(file, None, "", "invalid YAML: nested too deeply") from None
    if problems:
        raise ConfigError(problems)
    return doc


def read_yaml(path: str) -> YamlDoc:
    """One file users write, parsed: no model is needed (nor imported) to read it."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError.single(path, None, "", os_message(exc)) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError.single(path, None, "", f"file is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError.single(path, line, "", f"not UTF-8 text ({exc.reason})") from None
    return parse_yaml(text, path)


def os_message(exc: OSError) -> str:
    return f"cannot read: {exc.strerror or exc}"


def _checked_node(text: str, file: str, loader: type[yaml.SafeLoader]) -> yaml.Node | None:
    """The document's node tree, once `_refuse_anchors` let it through."""
    try:
        _refuse_anchors(text, file, loader)
        return yaml.compose(text, Loader=loader)
    except RecursionError:
        raise ConfigError.single(file, None, "", "invalid YAML: nested too deeply") from None


def _syntax_error(exc: yaml.YAMLError, text: str, file: str) -> ConfigError:
    """One located, one-line problem: PyYAML's own `str()` spans several lines."""
    line: int | None = None
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        message = ", ".join(part for part in (exc.context, exc.problem) if part) or message
    elif isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
    return ConfigError.single(file, line, "", f"invalid YAML: {message}")


MAX_DEPTH = 64
STANDARD_COLLECTION_TAGS = frozenset(
    {None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap"}
)


def _refuse_anchors(text: str, file: str, loader: type[yaml.SafeLoader]) -> None:
    """One streaming pass that refuses anchors, aliases, foreign tags and deep nesting.

    Depth is checked here, on events, because the recursive composer takes tens of seconds
    to reach Python's recursion limit on a few thousand nested brackets.
    """
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        line = event.start_mark.line + 1 if event.start_mark else None
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise ConfigError.single(
                file, line, "", "YAML anchors and aliases are not allowed; write values out"
            )
        if isinstance(event, yaml.CollectionStartEvent):
            if event.tag not in STANDARD_COLLECTION_TAGS:
                raise ConfigError.single(file, line, "", f"YAML tag {event.tag!r} is not allowed")
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigError.single(
                    file, line, "", f"invalid YAML: nested deeper than {MAX_DEPTH} levels"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _build(
    node: yaml.Node, path: Path, doc: YamlDoc, problems: list[Problem], loader: yaml.SafeLoader
) -> Any:
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        return _build_mapping(node, path, doc, problems, loader)
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            items.append(_build(item, (*path, index), doc, problems, loader))
        return items
    value, problem = _construct(node, loader)
    if problem is not None:
        line = node.start_mark.line + 1
        problems.append(Problem(doc.file, line, _dotted(path), f"invalid value: {problem}"))
    return value


def _construct(node: yaml.Node, loader: yaml.SafeLoader) -> tuple[Any, str | None]:
    """A scalar's value, or None and a one-line reason (`!!int x` raises a bare ValueError)."""
    ambiguous = _yaml11_surprise(node, loader)
    if ambiguous is not None:
        return None, ambiguous
    try:
        return loader.construct_object(node, deep=True), None
    except yaml.MarkedYAMLError as exc:
        return None, exc.problem or str(exc).splitlines()[0]
    except (yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError):
        return None, f"{_short(node.value)} is not a valid {node.tag.rsplit(':', 1)[-1]}"


BOOL_TAG = "tag:yaml.org,2002:bool"
INT_TAG = "tag:yaml.org,2002:int"
PLAIN_DECIMAL = re.compile(r"[-+]?(0|[1-9][0-9]*)\Z")


def _yaml11_surprise(node: yaml.Node, loader: yaml.SafeLoader) -> str | None:
    """Why an unquoted scalar would not mean what it looks like, or None.

    PyYAML implements YAML 1.1: `NO`, `off`, `y` become booleans (a country code, a mode or
    an answer silently turns into `false`), `010` is octal 8 and `1:20` is sexagesimal 80.
    Only the spellings that YAML 1.2 and every reader agree on are accepted unquoted.
    """
    if not isinstance(node, yaml.ScalarNode) or node.style:  # plain: None, or "" from libyaml
        return None
    implicit: str = loader.resolve(yaml.ScalarNode, node.value, (True, False))  # type: ignore[no-untyped-call]
    if implicit != node.tag:
        return None  # an explicit tag (`!!bool x`): its own constructor judges it
    if node.tag == BOOL_TAG and node.value not in (
        "true",
        "false",
        "True",
        "False",
        "TRUE",
        "FALSE",
    ):
        return f"{_short(node.value)} is a YAML 1.1 boolean; write true or false, or quote it"
    if node.tag == INT_TAG and not PLAIN_DECIMAL.match(node.value):
        return (
            f"{_short(node.value)} is a YAML 1.1 number in another base;"
            " write it in decimal, or quote it"
        )
    return None


def _build_mapping(
    node: yaml.MappingNode,
    path: Path,
    doc: YamlDoc,
    problems: list[Problem],
    loader: yaml.SafeLoader,
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            problems.append(Problem(doc.file, line, _dotted(path), "keys must be plain scalars"))
            continue
        key_value, problem = _construct(key_node, loader)
        if problem is not None:
            problems.append(Problem(doc.file, line, _dotted(path), f"invalid key: {problem}"))
            continue
        key = str(key_value)
        if key in result:
            first = doc.lines.get((*path, key))
            problems.append(
                Problem(
                    doc.file,
                    line,
                    _dotted((*path, key)),
                    f"duplicate key (first defined on line {first}); remove one",
                )
            )
            continue
        doc.lines[(*path, key)] = line
        result[key] = _build(value_node, (*path, key), doc, problems, loader)
    return result


def _dotted(path: Path) -> str:
    """`("rules", 0, "id")` → `rules[0].id`, the field style of every other problem."""
    out = ""
    for segment in path:
        out += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if out else segment)
    return out


def _short(value: object) -> str:
    """A value quoted for a one-line message, cut so a 5,000-digit number stays readable."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
