"""The JSON Schemas for editors: generated from the models, committed current, named by the
example files, and accepting every file the project ships (and refusing a typo)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from gateway.offline.schema import KINDS, json_schema, schema_path, schema_text
from tests.support.paths import EXAMPLES, REPO

MAPPINGS = REPO / "mappings"
NAMED = re.compile(r"^# yaml-language-server: \$schema=(\S+)$", re.MULTILINE)
EXAMPLE_FILES = {
    EXAMPLES / "gateway.yaml": "config",
    EXAMPLES / "rules" / "demo-api.yaml": "rules",
    EXAMPLES / "rules" / "demo-api.fixtures.yaml": "fixtures",
    REPO / "deploy" / "compose" / "gateway.yaml": "config",
}


def validator(kind: str) -> Any:
    """A validator of the schema's own dialect, after checking the schema itself."""
    schema = json_schema(kind)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_committed_schema_is_current(kind: str) -> None:
    committed = (REPO / schema_path(kind)).read_text(encoding="utf-8")
    assert committed == schema_text(kind), (
        f"{schema_path(kind)} is stale: run  mendpoint schema {kind} > {schema_path(kind)}"
    )


def test_the_command_prints_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "schema", "rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert json.loads(result.stdout) == json_schema("rules")


@pytest.mark.parametrize(
    ("path", "kind"), list(EXAMPLE_FILES.items()), ids=[p.name for p in EXAMPLE_FILES]
)
def test_example_files_name_their_schema_and_pass_it(path: Path, kind: str) -> None:
    named = NAMED.search(path.read_text(encoding="utf-8"))
    assert named, f"{path} does not name its schema"
    target = (path.parent / named.group(1)).resolve()
    assert target == (REPO / schema_path(kind)).resolve()
    validator(kind).validate(load(path))


@pytest.mark.parametrize("path", sorted(MAPPINGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_packs_pass_the_rules_schema(path: Path) -> None:
    validator("rules").validate(load(path))


@pytest.mark.parametrize(
    "path", sorted((MAPPINGS / "fixtures").glob("*.yaml")), ids=lambda p: p.name
)
def test_shipped_fixtures_pass_the_fixtures_schema(path: Path) -> None:
    validator("fixtures").validate(load(path))


@pytest.mark.parametrize(
    ("kind", "document", "where"),
    [
        ("config", {"routes": [{"name": "a", "upstream": "http://x", "mdoe": "envelope"}]}, "mdoe"),
        ("config", {"listen": "127.0.0.1:8080"}, "routes"),
        ("rules", {"rules": [{"id": "r", "match": {"stauts": [400]}, "error": {}}]}, "stauts"),
        (
            "rules",
            {"rules": [{"id": "r", "match": {}, "error": {"code": "X", "category": "NOPE"}}]},
            "NOPE",
        ),
        ("fixtures", {"cases": [{"name": "x", "expect": {"cod": "X"}}]}, "cod"),
    ],
    ids=["config-typo", "config-no-routes", "rule-typo", "rule-category", "fixture-typo"],
)
def test_the_schema_refuses_what_the_loader_refuses(
    kind: str, document: dict[str, Any], where: str
) -> None:
    errors = list(validator(kind).iter_errors(document))
    assert errors
    assert any(where in str(e.message) or where in json.dumps(list(e.path)) for e in errors)
