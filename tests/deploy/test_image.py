"""The container image: tagged with the version it holds, and built from the versions the suite
passed with (requirements/test.lock), which the image's own install steps are run to show."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import __version__
from tests.support.paths import DEPLOY
from tests.support.waits import patience

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


LOCK = "requirements/test.lock"


def stages() -> list[list[str]]:
    """The Dockerfile's instructions, stage by stage, continuation lines joined."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    found: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("FROM "):
            found.append([])
        if line and not line.startswith("#") and found:
            found[-1].append(line)
    return found


def run_lines(stage: list[str]) -> list[list[str]]:
    """Each `RUN` of a stage as argv lists, one per command of a `&&` chain."""
    commands = []
    for line in stage:
        if line.startswith("RUN "):
            commands += [shlex.split(part) for part in line[4:].split("&&")]
    return commands


def test_the_image_installs_under_the_lock() -> None:
    """The build stage copies the lock where its `pip wheel` reads it as constraints, so the
    image runs the dependency versions the suite passed with, not the newest of each."""
    build, final = stages()
    (wheel,) = [argv for argv in run_lines(build) if argv[:2] == ["pip", "wheel"]]
    assert wheel[wheel.index("-c") + 1] == LOCK
    workdir = next(line.split()[1] for line in build if line.startswith("WORKDIR "))
    copies = {line.split()[-1]: line.split()[1] for line in build if line.startswith("COPY ")}
    assert copies[f"./{LOCK}"] == LOCK  # at WORKDIR/requirements/test.lock
    assert workdir == "/src"
    (install,) = [argv for argv in run_lines(final) if argv[:2] == ["pip", "install"]]
    assert "--no-index" in install  # only the wheels the build stage made under the lock
    assert (DEPLOY.parent / LOCK).is_file()


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY.parent / LOCK).read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonical(name)] = version
    return pins


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_images_install_steps_give_the_locks_versions(tmp_path: Path) -> None:
    """The two stages' pip commands, run as written (but for the cache flag, and with the
    container's paths under tmp_path) in a context holding what the build stage copies: every
    distribution the image would hold is at the lock's version."""
    build, final = stages()
    context, wheels = tmp_path / "src", tmp_path / "wheels"
    context.mkdir()
    for line in build:
        if line.startswith("COPY "):
            *sources, target = line.split()[1:]
            for source in sources:
                place = context / target
                if target.endswith("/"):
                    place = place / Path(source).name
                origin = DEPLOY.parent / source
                place.parent.mkdir(parents=True, exist_ok=True)
                if origin.is_dir():
                    shutil.copytree(origin, place, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(origin, place)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=patience(120))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def pip(argv: list[str], cwd: Path) -> None:
        argv = [str(wheels) if a == "/wheels" else a for a in argv if a != "--no-cache-dir"]
        done = subprocess.run(
            [str(venv / "bin" / "pip"), *argv[1:]],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=patience(600),
        )
        assert done.returncode == 0, done.stderr[-3000:]

    (wheel,) = [argv for argv in run_lines(build) if argv[:2] == ["pip", "wheel"]]
    pip(wheel, context)
    (install,) = [argv for argv in run_lines(final) if argv[:2] == ["pip", "install"]]
    pip(install, tmp_path)
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {canonical(d["name"]): d["version"] for d in json.loads(listed)}
    pins = lock_pins()
    runtime = {"aiohttp", "pydantic", "pyyaml", "regex", "prometheus-client", "orjson", "redis"}
    assert runtime <= installed.keys() & pins.keys()
    off = {
        name: (version, pins[name])
        for name, version in installed.items()
        if name in pins and version != pins[name]
    }
    assert not off, f"installed (left) where the lock pins (right): {off}"
    assert installed["mendpoint"] == __version__
