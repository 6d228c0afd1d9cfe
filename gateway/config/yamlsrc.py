"""YAML parsing that remembers where every value came from.

PyYAML lets a duplicate key silently override the first and expands anchors into shared
objects; for a rule file both hide mistakes (a second `fix_command:` would win unnoticed).
This module parses with the safe loader's node tree, refuses duplicates and anchors/aliases,
and records the line of every mapping key and sequence item so later validation errors can
name `FILE:LINE`.
"""

from __future__ import annotations

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


def parse_yaml(text: str, file: str) -> YamlDoc:
    """Parse one YAML document; raise `ConfigError` for syntax, duplicates or anchors."""
    try:
        _refuse_anchors(text, file)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, text, file) from None
    except RecursionError:
        raise ConfigError.single(file, None, "", "invalid YAML: nested too deeply") from None
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


def _refuse_anchors(text: str, file: str) -> None:
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            line = event.start_mark.line + 1 if event.start_mark else None
            raise ConfigError.single(
                file, line, "", "YAML anchors and aliases are not allowed; write values out"
            )


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
    try:
        return loader.construct_object(node, deep=True), None
    except yaml.MarkedYAMLError as exc:
        return None, exc.problem or str(exc).splitlines()[0]
    except (yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError):
        return None, f"{node.value!r} is not a valid {node.tag.rsplit(':', 1)[-1]}"


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
