"""The wheel holds every folder of the package, each listed, so no install warns or drops one.

setuptools warns (forty lines, on every install) about a folder that holds files but is not in
`[tool.setuptools] packages`, and a later setuptools will leave it out of the wheel.
"""

from __future__ import annotations

import tomllib

from tests.support.paths import PACKAGE, REPO


def test_every_folder_of_the_package_is_listed() -> None:
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(settings["packages"])
    folders = {
        ".".join(path.relative_to(PACKAGE.parent).parts)
        for path in PACKAGE.rglob("*")
        if path.is_dir() and path.name != "__pycache__" and any(path.iterdir())
    }
    folders |= {"gateway"}
    assert folders - listed == set(), "add these to [tool.setuptools] packages"
    mappings = {
        "gateway.mappings." + ".".join(p.relative_to(REPO / "mappings").parts)
        for p in (REPO / "mappings").rglob("*")
        if p.is_dir() and p.name != "__pycache__"
    }
    assert mappings - listed == set(), "add these to [tool.setuptools] packages"
