"""Each undocumented CPython name the gateway relies on, checked against this interpreter.

gateway/fence/cpython_private.py is the one module that touches them (the last test keeps it
so). When a Python upgrade changes one, the test named after it fails: read that module's
docstring for why the name is used, and adapt it there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gateway.config.prefilter import required_words
from gateway.fence.cpython_private import scanstring, sre_constants, sre_parse
from gateway.text.json_insert import scan_document
from tests.support.paths import PACKAGE


def test_sre_parse_gives_the_tree_the_prefilter_reads() -> None:
    parsed = sre_parse.parse(r"(?i)quota (exceeded|reached)")
    assert parsed.state.flags & sre_constants.SRE_FLAG_IGNORECASE
    ops = [op for op, _ in parsed]
    assert sre_constants.LITERAL in ops and sre_constants.SUBPATTERN in ops
    for name in (
        "ASSERT",
        "ATOMIC_GROUP",
        "BRANCH",
        "MAX_REPEAT",
        "MIN_REPEAT",
        "POSSESSIVE_REPEAT",
    ):
        assert hasattr(sre_constants, name), f"re._constants.{name} is gone"
    words = required_words(r"quota (exceeded|reached)")  # the one user, on that tree
    assert words is not None and {n.word for n in words} == {"exceeded", "reached"}


def test_scanstring_decodes_a_member_name_as_the_json_decoder_does() -> None:
    text = '{"na\\u006de": 1}'
    assert scanstring(text, 2, True) == ("name", 12)
    with pytest.raises(ValueError):
        scanstring('"bad \x01 control"', 1, True)
    found = scan_document(text)  # its one user reads member names through it
    assert found is not None and found.names() == frozenset({"name"})


OTHERS = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "cpython_private.py")
SRE_MODULES = {"sre_parse", "sre_constants", "sre_compile"}
SRE_MODULES = {"sre_parse", "sre_constants", "sre_compile"}


@pytest.mark.parametrize("path", OTHERS, ids=[str(p.relative_to(PACKAGE)) for p in OTHERS])
def test_no_other_module_uses_cpython_internals(path: Path) -> None:
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in {"re", "json.decoder", "json"}:
            used |= {a.name for a in node.names if a.name.startswith("_") or a.name == "scanstring"}
        elif isinstance(node, ast.ImportFrom) and node.module in SRE_MODULES:
            used.add(node.module)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in {("re", "_parser"), ("re", "_constants")}:
                used.add(f"re.{node.attr}")
            elif node.attr == "scanstring":
                used.add(node.attr)
    assert used == set(), "move these into gateway/fence/cpython_private.py"
