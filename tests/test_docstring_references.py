"""Every module a docstring names exists: a move or a rename cannot leave a stale reference.

Docstrings name the package's modules in full, as `gateway.exchange.answer` (a name defined
at a module's top level may follow: `gateway.http.cached_answers.CachedAnswers`) or as a path,
`gateway/exchange/answer.py`; both must resolve. A short form (`exchange.answer`) that names a
module today is refused too: only the full form fails when that module moves. Short dotted
words that are not modules stay free (config keys such as `mcp.max_message_bytes`, trace
attributes such as `http.request.method`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.support.paths import PACKAGE

MODULES = sorted(PACKAGE.rglob("*.py"))
BANDS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py")))


def dotted(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {dotted(p): p for p in MODULES}
FULL = re.compile(r"\bgateway(?:\.[A-Za-z_]\w*)+")
FULL_PATH = re.compile(r"\bgateway/([\w/]+\.py)\b")
SHORT = re.compile(r"`((?:" + "|".join(BANDS) + r")\.[a-z_]\w*)")
SHORT_NAMES = frozenset(n.removeprefix("gateway.") for n in NAMES)


@cache
def top_level(path: Path) -> frozenset[str]:
    """What a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def resolves(reference: str) -> bool:
    """A module, a package, or a name at the top level of one."""
    parts = reference.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        if module in NAMES:
            rest = parts[end:]
            return not rest or rest[0] in top_level(NAMES[module])
    return False


def docstrings(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield text
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            value = node.value.value
            if isinstance(value, str):
                yield value  # an attribute's docstring


def stale(text: str) -> set[str]:
    found = {ref.rstrip(".") for ref in FULL.findall(text) if not resolves(ref.rstrip("."))}
    found |= {f"gateway/{p}" for p in FULL_PATH.findall(text) if not (PACKAGE / p).exists()}
    return found


def short(text: str) -> set[str]:
    """Short forms that name a module: they would go stale silently when it moves."""
    return {ref for ref in SHORT.findall(text) if ref in SHORT_NAMES}


@pytest.mark.parametrize("path", MODULES, ids=[dotted(p) for p in MODULES])
def test_every_module_a_docstring_names_exists(path: Path) -> None:
    found = set().union(*(stale(text) for text in docstrings(path)))
    assert found == set(), "name a module that exists, in full"


@pytest.mark.parametrize("path", MODULES, ids=[dotted(p) for p in MODULES])
def test_docstrings_name_modules_in_full(path: Path) -> None:
    found = set().union(*(short(text) for text in docstrings(path)))
    assert found == set(), "write gateway.BAND.MODULE (or gateway/BAND/MODULE.py)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see `gateway.exchange.answer`", set()),
        ("see gateway.exchange.answer.Answers.response", set()),
        ("see `gateway.proxy.forward`", {"gateway.proxy.forward"}),
        ("gateway/proxy/forward.py, gateway/exchange/answer.py", {"gateway/proxy/forward.py"}),
        ("see gateway.exchange.answer.NoSuchThing", {"gateway.exchange.answer.NoSuchThing"}),
    ],
    ids=["module", "attribute", "gone", "gone-path", "gone-name"],
)
def test_a_stale_reference_is_found(text: str, expected: set[str]) -> None:
    assert stale(text) == expected


def test_a_short_form_is_found_but_not_a_config_key() -> None:
    assert short("`exchange.answer` and `mcp.max_message_bytes`") == {"exchange.answer"}
