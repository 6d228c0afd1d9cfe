"""The docs keep up with the code: every config key is documented, and README links resolve.

`make docs` (mkdocs, strict) checks the links inside docs/; these tests check what mkdocs
cannot see: the pydantic models behind the config and rule files, and the README, which lives
outside the site.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.config.models import GatewayConfig, KeysFile
from gateway.config.rule_model import RulePack
from gateway.offline.fixtures import FixtureFile
from tests.support.paths import DOCS, REPO, TESTS


def nested_models(annotation: Any) -> Iterator[tuple[type[BaseModel], str]]:
    """The models inside a field's type, each with the path suffix that reaches it.

    `list[X]` is reached as `key[]`, `dict[str, X]` as `key.<id>`, `X | None` and
    `Annotated[X, ...]` as `key`. `X | list[X]` (one item, or a list of them) is documented
    once, as `key.sub`.
    """
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, ""
    elif origin is list:
        for model, suffix in nested_models(args[0]):
            yield model, "[]" + suffix
    elif origin is dict:
        for model, suffix in nested_models(args[1]):
            yield model, ".<id>" + suffix
    elif origin is typing.Annotated:
        yield from nested_models(args[0])
    elif origin in (typing.Union, types.UnionType):
        found = [pair for arg in args for pair in nested_models(arg)]
        direct = {model for model, suffix in found if suffix == ""}
        yield from ((m, s) for m, s in found if not (s == "[]" and m in direct))


def key_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key a user can write under `model`, as `routes[].rollout.percent` paths."""
    for name, field in model.model_fields.items():
        path = prefix + (field.alias or name)
        yield path
        for sub, suffix in nested_models(field.annotation):
            yield from key_paths(sub, path + suffix + ".")


CONFIG_KEYS = sorted({*key_paths(GatewayConfig), *key_paths(RulePack), *key_paths(KeysFile)})
FIXTURE_KEYS = sorted(set(key_paths(FixtureFile)))


def test_the_walk_reaches_nested_keys() -> None:
    """Through lists, optionals, unions and maps, and by alias (`json`, not `json_`)."""
    for path in (
        "routes[].rollout.percent",
        "callers.keys[].key",
        "rules[].match.json.path",
        "rules[].error.retry_after_ms.unit",
        "commands.<id>.run",
        "policies[].allow.skills",
        "keys[].scopes",
    ):
        assert path in CONFIG_KEYS
    assert "rules[].match.json_" not in CONFIG_KEYS
    assert "rules[].match.json[].path" not in CONFIG_KEYS  # `X | list[X]`: once, as `json.path`
    assert "cases[].mcp.error.code" in FIXTURE_KEYS


def undocumented(keys: list[str], page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [key for key in keys if f"`{key}`" not in text]


def test_every_config_and_rule_file_key_is_in_configuration_md() -> None:
    missing = undocumented(CONFIG_KEYS, DOCS / "configuration.md")
    assert not missing, f"add these keys to docs/configuration.md: {missing}"


def test_every_fixture_key_is_in_rules_md() -> None:
    missing = undocumented(FIXTURE_KEYS, DOCS / "rules.md")
    assert not missing, f"add these fixture keys to docs/rules.md: {missing}"


def slug(heading: str) -> str:
    """The anchor mkdocs' table of contents gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower().replace("`", ""))
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(page: Path) -> set[str]:
    """The page's heading anchors: `{#id}` where a heading sets one, else its slug."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    found = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        explicit = re.search(r"\{#([\w-]+)\}\s*$", heading)
        found.add(explicit.group(1) if explicit else slug(heading))
    return found


README_LINKS = [
    link
    for link in re.findall(r"\]\(([^)\s]+)\)", (REPO / "README.md").read_text(encoding="utf-8"))
    if not re.match(r"^[a-z]+:", link)  # relative links only: no network in the tests
]


def test_the_readme_links_into_docs() -> None:
    assert any(link.startswith("docs/") for link in README_LINKS)


@pytest.mark.parametrize("link", sorted(set(README_LINKS)))
def test_readme_links_resolve(link: str) -> None:
    target, _, anchor = link.partition("#")
    path = REPO / target
    assert path.is_file(), f"README links to {target}, which does not exist"
    if anchor:
        assert anchor in anchors(path), f"{path.name} has no heading for #{anchor}"


def test_help_names_the_contract() -> None:
    """`mendpoint --help` points at docs/spec.md (which the citation test proves exists)."""
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert "docs/spec.md" in out


# Code, tests and tools cite the project's own docs pages, not a section of a contract kept
# outside the repository or an issue number.
CITATION = re.compile(r"\bSPEC\b|(?i:\bissue #?\d+)")
CITING_DIRS = ("gateway", "tests", "bench", "examples", "deploy", "mappings", ".ci", "clients")


SKIPPED_DIRS = {"node_modules", "__pycache__", "results"}


def cited_files() -> Iterator[Path]:
    """The project's own text files (installed npm packages and generated output pruned)."""
    yield REPO / "Makefile"
    for top in CITING_DIRS:
        for root, dirs, files in os.walk(REPO / top):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            for name in sorted(files):
                if not name.endswith((".pyc", ".json")):
                    yield Path(root) / name


def test_code_cites_docs_pages_not_spec_sections_or_issues() -> None:
    this = Path(__file__).resolve()
    lines = [
        (path, number, line)
        for path in cited_files()
        if path.resolve() != this
        for number, line in enumerate(path.read_text("utf-8", "replace").splitlines(), 1)
    ]
    assert any(path.is_relative_to(TESTS) for path, _, _ in lines)
    found = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()}"
        for p, n, line in lines
        if CITATION.search(line)
    ]
    assert not found, "cite docs/<page>.md instead:\n" + "\n".join(found)
    cited = {
        ref for _, _, line in lines for ref in re.findall(r"\bdocs/[\w-]+\.md(?:#[\w-]+)?", line)
    }
    assert "docs/spec.md" in cited
    missing = sorted(ref for ref in cited if not (REPO / ref.partition("#")[0]).is_file())
    assert not missing, f"code cites docs pages that do not exist: {missing}"
    unanchored = sorted(
        ref
        for ref in cited
        if "#" in ref and ref.partition("#")[2] not in anchors(REPO / ref.partition("#")[0])
    )
    assert not unanchored, f"code cites headings that do not exist: {unanchored}"
