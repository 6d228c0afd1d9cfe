"""libyaml and the pure-Python parser read every config the same (gateway/config/yamlsrc.py).

`parse_yaml` uses libyaml where PyYAML has it, for start-up time
(docs/performance.md#mcp-start-up), and the pure-Python parser for the error of a text libyaml
refuses. Every shipped pack and fixture file, the examples and the hostile config corpus
give the same data, the same line of every key and item, and the same error, either way.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.config import yamlsrc
from gateway.config.errors import ConfigError
from tests.support.paths import REPO

FILES = sorted(
    [
        *REPO.glob("mappings/*.yaml"),
        *REPO.glob("mappings/fixtures/**/*.yaml"),
        *REPO.glob("examples/**/*.yaml"),
        *REPO.glob("tests/corpus/config/*.yaml"),
    ]
)


def read(text: str, fast: type[yaml.SafeLoader] | None, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setattr(yamlsrc, "FAST_LOADER", fast)
    try:
        doc = yamlsrc.parse_yaml(text, "f.yaml")
    except ConfigError as exc:
        return ("error", str(exc))
    return (doc.data, doc.lines)


def test_libyaml_is_there() -> None:
    assert yamlsrc.FAST_LOADER is not None, "PyYAML without libyaml: start-up is slower"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REPO)) for p in FILES])
def test_both_parsers_read_the_file_alike(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_text(errors="replace")
    assert read(text, yamlsrc.FAST_LOADER, monkeypatch) == read(text, None, monkeypatch)


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\na: 2\n",
        "a: &x 1\nb: *x\n",
        "a: !!python/name:os.system\n",
        "a:\n\t- 1\n",
        "a: [1, 2\n",
        "[" * 100 + "]" * 100,
        "a: 'unterminated\n",
        "- a\n- b: c\n  d: [e, {f: g}]\n",
        "key: value\n---\nsecond: doc\n",
    ],
)
def test_both_parsers_refuse_alike(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read(text, yamlsrc.FAST_LOADER, monkeypatch) == read(text, None, monkeypatch)
