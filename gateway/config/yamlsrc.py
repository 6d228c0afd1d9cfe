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
    _refuse_anchors(text, file)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError.single(file, line, "", f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError.single(file, None, "", f"invalid YAML: {exc}") from None
    doc = YamlDoc(file=file, data=None)
    if node is None:
        doc.data = {}
        return doc
    problems: list[Problem] = []
    doc.data = _build(node, (), doc, problems, yaml.SafeLoader(""))
    if problems:
        raise ConfigError(problems)
    return doc


def _refuse_anchors(text: str, file: str) -> None:
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                line = event.start_mark.line + 1 if event.start_mark else None
                raise ConfigError.single(
                    file, line, "", "YAML anchors and aliases are not allowed; write values out"
                )
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError.single(file, line, "", f"invalid YAML: {exc.problem or exc}") from None


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
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        line = node.start_mark.line + 1
        problems.append(Problem(doc.file, line, _dotted(path), f"invalid value: {exc}"))
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
        key = str(loader.construct_object(key_node))
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
    return ".".join(str(p) for p in path)
