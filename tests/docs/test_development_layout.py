"""docs/development.md lists every module of the package, so its layout cannot fall behind."""

from __future__ import annotations

from tests.support.paths import PACKAGE, REPO


def test_the_layout_lists_every_module() -> None:
    text = (REPO / "docs" / "development.md").read_text()
    modules = sorted(
        f"gateway/{p.relative_to(PACKAGE)}"
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" or p.parent == PACKAGE
    )
    missing = [m for m in modules if m not in text]
    assert missing == [], f"add to docs/development.md#layout: {missing}"


def test_the_layout_lists_no_module_that_is_gone() -> None:
    text = (REPO / "docs" / "development.md").read_text()
    named = {word.strip("`(),.") for word in text.split() if word.startswith("gateway/")}
    gone = sorted(n for n in named if n.endswith(".py") and not (REPO / n).exists())
    assert gone == []
