"""`gateway.config.yamlsrc`: YAML with a source line for every key and item, and no surprises.

A duplicate key, an anchor, a second document or a bad scalar is a located `ConfigError`,
never a silently different value and never a bare PyYAML exception.
"""

from __future__ import annotations

import textwrap

import pytest

from gateway.config.errors import ConfigError
from gateway.config.yamlsrc import Path, YamlDoc, parse_yaml

NESTED = textwrap.dedent(
    """\
    # a comment on line 1
    listen: 127.0.0.1:8080
    routes:
      - name: data
        prefix: /v1
        upstream: http://127.0.0.1:9000
      - name: other
        upstream: http://127.0.0.1:9001
    rules:
      - id: r1
        match:
          status: [400, "5xx"]
          headers:
            content-type: json
        error: {code: X, category: VALIDATION_ERROR}
    """
)


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_yaml(text, "f.yaml")
    return [str(p) for p in info.value.problems]


def test_data_is_plain_python() -> None:
    doc = parse_yaml(NESTED, "f.yaml")
    assert doc.data["routes"][1] == {"name": "other", "upstream": "http://127.0.0.1:9001"}
    assert doc.data["rules"][0]["match"]["status"] == [400, "5xx"]
    assert doc.file == "f.yaml"


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ((), 2),
        (("listen",), 2),
        (("routes",), 3),
        (("routes", 0), 4),
        (("routes", 0, "name"), 4),
        (("routes", 0, "prefix"), 5),
        (("routes", 0, "upstream"), 6),
        (("routes", 1), 7),
        (("routes", 1, "upstream"), 8),
        (("rules", 0, "match"), 11),
        (("rules", 0, "match", "status"), 12),
        (("rules", 0, "match", "status", 1), 12),
        (("rules", 0, "match", "headers", "content-type"), 14),
        (("rules", 0, "error", "category"), 15),
    ],
    ids=lambda value: ".".join(map(str, value)) if isinstance(value, tuple) else str(value),
)
def test_line_of_nested_keys_and_items(path: Path, line: int) -> None:
    assert parse_yaml(NESTED, "f.yaml").line_of(path) == line


def test_line_of_falls_back_to_nearest_ancestor() -> None:
    doc = parse_yaml(NESTED, "f.yaml")
    assert doc.line_of(("routes", 1, "prefix")) == 7  # not written: the item's line
    assert doc.line_of(("rules", 0, "match", "headers", "Content-Type")) == 13
    assert YamlDoc(file="x", data={}).line_of(("a",)) is None


def test_root_sequence_items_have_lines() -> None:
    doc = parse_yaml("- a\n- b\n\n- c\n", "f.yaml")
    assert doc.data == ["a", "b", "c"]
    assert [doc.line_of((i,)) for i in range(3)] == [1, 2, 4]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\nb: 2\na: 3\n", "f.yaml:3: a: duplicate key (first defined on line 1)"),
        (
            "rules:\n  - id: r\n    error:\n      fix_command: a\n      fix_command: b\n",
            "f.yaml:5: rules[0].error.fix_command: duplicate key (first defined on line 4)",
        ),
        ("m: {x: 1, x: 2}\n", "f.yaml:1: m.x: duplicate key (first defined on line 1)"),
        ("1: a\n'1': b\n", "f.yaml:2: 1: duplicate key"),
    ],
    ids=["top-level", "nested-in-list", "flow-mapping", "int-and-string-key"],
)
def test_duplicate_key_is_refused_at_the_second(text: str, expected: str) -> None:
    problems = _problems(text)
    assert len(problems) == 1
    assert problems[0].startswith(expected)


def test_every_duplicate_is_reported() -> None:
    problems = _problems("a: 1\na: 2\nb:\n  c: 1\n  c: 2\n")
    assert [p.split(" ", 1)[0] for p in problems] == ["f.yaml:2:", "f.yaml:5:"]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: &x 1\nb: *x\n", 1),
        ("a: 1\nbase: &b\n  k: v\n", 2),
        ("a:\n  - &i item\n", 2),
        ("a: 1\nb: {<<: {k: v}}\n", 2),
    ],
    ids=["anchor-and-alias", "anchor-on-mapping", "anchor-on-item", "merge-key"],
)
def test_anchors_aliases_and_merge_keys_are_refused(text: str, line: int) -> None:
    problems = _problems(text)
    assert len(problems) == 1
    assert problems[0].startswith(f"f.yaml:{line}:")
    assert "anchors and aliases" in problems[0] or "plain scalars" in problems[0]


@pytest.mark.parametrize(
    "text", ["", "\n\n", "# only a comment\n", "---\n", "---\n# rules to come\n"]
)
def test_empty_document_is_an_empty_mapping(text: str) -> None:
    doc = parse_yaml(text, "f.yaml")
    assert doc.data == {}
    assert doc.lines == {}


def test_explicit_document_start_is_one_document() -> None:
    doc = parse_yaml("---\na: 1\n", "f.yaml")
    assert doc.data == {"a": 1}
    assert doc.line_of(("a",)) == 2


@pytest.mark.parametrize(
    ("text", "line"),
    [("a: 1\n---\nb: 2\n", 2), ("---\na: 1\n---\n", 3)],
    ids=["two-documents", "trailing-document"],
)
def test_multiple_documents_are_refused(text: str, line: int) -> None:
    problems = _problems(text)
    assert problems == [
        f"f.yaml:{line}: invalid YAML: expected a single document in the stream,"
        " but found another document"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1, 2\n", "f.yaml:2: invalid YAML: while parsing a flow sequence"),
        ("a: b: c\n", "f.yaml:1: invalid YAML: mapping values are not allowed here"),
        ('ok: 1\nbad: "x\x01"\n', "f.yaml:2: invalid YAML: unacceptable character #x0001"),
        ("a: !!int x\n", "f.yaml:1: a: invalid value: 'x' is not a valid int"),
        ("a:\n  b: !!bool maybe\n", "f.yaml:2: a.b: invalid value: 'maybe' is not a valid bool"),
        ("a: [1, !!float x]\n", "f.yaml:1: a[1]: invalid value: 'x' is not a valid float"),
        ("!!int x: 1\n", "f.yaml:1: invalid key: 'x' is not a valid int"),
        ("a: !!python/object x\n", "f.yaml:1: a: invalid value: could not determine"),
        ("a: " + "[" * 500 + "]" * 500 + "\n", "f.yaml:1: invalid YAML: nested deeper than 64"),
    ],
    ids=[
        "unclosed-flow",
        "mapping-in-scalar",
        "control-character",
        "bad-int-tag",
        "bad-bool-tag",
        "bad-float-in-list",
        "bad-key-tag",
        "python-tag",
        "too-deep",
    ],
)
def test_bad_yaml_is_one_located_line(text: str, expected: str) -> None:
    problems = _problems(text)
    assert len(problems) == 1
    assert problems[0].startswith(expected)
    assert "\n" not in problems[0]


def test_non_scalar_keys_are_refused() -> None:
    problems = _problems("? [a, b]\n: 1\n")
    assert problems == ["f.yaml:1: keys must be plain scalars"]
