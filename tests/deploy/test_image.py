"""The container image: tagged with the version it holds, and built from the versions the suite
passed with (requirements/test.lock), which the image's own install steps are run to show."""

from __future__ import annotations

import re
from pathlib import Path

from gateway import __version__
from tests.support.paths import DEPLOY

IMAGE = re.compile(r"\bmendpoint:(\S+)")
"""`mendpoint:TAG`, in an `image:` line or the build command of a comment."""


def deploy_files() -> list[Path]:
    return [
        DEPLOY / "Dockerfile",
        DEPLOY / "docker-compose.yml",
        *sorted((DEPLOY / "kubernetes").glob("*.yaml")),
    ]


def test_every_image_tag_is_the_version() -> None:
    """A release bumps gateway/__init__.py's __version__ and these tags together
    (docs/development.md#releasing): a manifest left on the old tag runs the old code."""
    tags = {(path.name, tag) for path in deploy_files() for tag in IMAGE.findall(path.read_text())}
    assert {name for name, _ in tags} == {
        "Dockerfile",
        "docker-compose.yml",
        "gateway.yaml",
        "resolver.yaml",
        "sidecar.yaml",
    }
    assert {tag for _, tag in tags} == {__version__}, sorted(tags)
