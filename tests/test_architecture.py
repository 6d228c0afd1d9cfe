"""Imports point one way: failure → config → classify/resolve → envelope → proxy → mcp →
handler → app → cli."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import PACKAGE

PACKAGE = PACKAGE
LAYERS = {
    "gateway": 0,
    "gateway.failure": 0,
    "gateway.observe": 0,
    "gateway.streams": 0,
    "gateway.logs": 0,
    "gateway.runtime": 0,
    "gateway.signatures": 0,
    "gateway.config": 1,
    "gateway.reload": 1,
    "gateway.classify": 2,
    "gateway.resolve": 2,
    "gateway.envelope": 3,
    "gateway.proxy": 4,
    "gateway.mcp": 5,
    "gateway.handler": 6,
    "gateway.explain": 6,
    "gateway.fixtures": 6,
    "gateway.admin": 6,
    "gateway.app": 7,
    "gateway.workers": 8,
    "gateway.supervisor": 8,
    "gateway.cli": 8,
    "gateway.__main__": 9,
}
MODULES = sorted(PACKAGE.rglob("*.py"))


def layer_of(module: str) -> int:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        layer = LAYERS.get(".".join(parts[:end]))
        if layer is not None and (end > 1 or module == "gateway"):
            return layer
    raise AssertionError(f"{module} is in no layer; add it to LAYERS")


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n == "gateway" or n.startswith("gateway.")}


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_no_module_imports_upward(path: Path) -> None:
    own = layer_of(module_name(path))
    upward = {name for name in imported(path) if layer_of(name) > own}
    assert not upward, f"{module_name(path)} (layer {own}) imports upward: {sorted(upward)}"


def test_only_observe_may_import_prometheus() -> None:
    offenders = [
        module_name(p)
        for p in MODULES
        if "prometheus_client" in p.read_text() and module_name(p) != "gateway.observe"
    ]
    assert offenders == []


TEST_MODULES = sorted((PACKAGE.parent / "tests").rglob("test_*.py"))


@pytest.mark.parametrize("path", TEST_MODULES, ids=[p.stem for p in TEST_MODULES])
def test_test_modules_import_only_the_support_package(path: Path) -> None:
    """Shared helpers live in tests/support; a test module never imports another test module."""
    tree = ast.parse(path.read_text())
    test_imports = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module
        and (node.module.startswith("tests.") or node.module in {"conftest", "faultserver"})
        and not node.module.startswith("tests.support")
    }
    assert test_imports == set()
