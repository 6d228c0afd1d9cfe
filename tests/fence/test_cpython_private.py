"""Each undocumented CPython name the gateway relies on, checked against this interpreter.

gateway/fence/cpython_private.py is the one module that touches them (the last test keeps it
so). When a Python upgrade changes one, the test named after it fails: read that module's
docstring for why the name is used, and adapt it there.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from gateway.config.prefilter import required_words
from gateway.fence.cpython_private import FlowControlMixin, scanstring, sre_constants, sre_parse
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


DOCUMENTED = frozenset({"DEVNULL", "PIPE", "STDOUT", "Process"})
"""Names asyncio documents only under their submodule (`asyncio.subprocess.PIPE`, …)."""


def _asyncio_internals(tree: ast.AST) -> set[str]:
    """Names of asyncio's submodules that are neither in `asyncio.__all__` nor documented,
    used as `asyncio.streams.X` or imported `from asyncio.streams import X`."""
    public = set(asyncio.__all__) | DOCUMENTED
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("asyncio."):
            used |= {a.name for a in node.names if a.name not in public}
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "asyncio"
            and node.attr not in public
        ):
            used.add(f"asyncio.{node.value.attr}.{node.attr}")
    return used


def test_the_check_sees_asyncio_internals_through_a_submodule() -> None:
    """The hole `asyncio.streams.FlowControlMixin` once went through."""
    tree = ast.parse("asyncio.streams.FlowControlMixin\nasyncio.streams.StreamWriter\n")
    assert _asyncio_internals(tree) == {"asyncio.streams.FlowControlMixin"}


def test_flow_control_mixin_gives_a_stream_writer_its_drain() -> None:
    """What `mendpoint stdio` and the MCP child build their write pipes' writers on."""
    assert issubclass(FlowControlMixin, asyncio.Protocol)
    assert callable(getattr(FlowControlMixin, "_drain_helper", None))


@pytest.mark.parametrize("path", OTHERS, ids=[str(p.relative_to(PACKAGE)) for p in OTHERS])
def test_no_other_module_uses_cpython_internals(path: Path) -> None:
    used = _asyncio_internals(ast.parse(path.read_text()))
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
