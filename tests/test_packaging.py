"""The wheel holds every folder of the package, each listed, so no install warns or drops one;
and the release's wheel and sdist, built as `make dist` builds them, serve from a clean venv
(docs/development.md#releasing).

setuptools warns (forty lines, on every install) about a folder that holds files but is not in
`[tool.setuptools] packages`, and a later setuptools will leave it out of the wheel.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway import __version__
from tests.support.paths import PACKAGE, REPO
from tests.support.ports import free_port
from tests.support.waits import patience

StartUpstream = Callable[[web.Application], Awaitable[str]]


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


# --- the release: `make dist`'s wheel and sdist, installed as a user installs them ------------

SPRING_400 = {
    "timestamp": "2026-12-05T10:00:00.000+00:00",
    "status": 400,
    "error": "Bad Request",
    "message": "Required request parameter 'quantity' for method parameter type int is not present",
    "path": "/v1/orders",
}
"""Spring Boot's own answer to a missing parameter: the builtin:spring-boot pack names it."""


def built(dist: Path) -> tuple[Path, Path]:
    """`python -m build` of the checkout into `dist`, as `make dist` runs it: (wheel, sdist)."""
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)],
        capture_output=True,
        text=True,
        timeout=patience(300),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    return wheel, sdist


def shipped_files() -> dict[str, set[str]]:
    """The packs and their fixtures, and the console's assets, as the checkout has them."""
    static = PACKAGE / "serve" / "console" / "static"
    return {
        "mappings": {
            p.relative_to(REPO / "mappings").as_posix() for p in (REPO / "mappings").rglob("*.yaml")
        },
        "static": {p.name for p in static.iterdir() if p.suffix in (".css", ".js", ".svg")},
    }


def clean_env() -> dict[str, str]:
    """This environment without what would lead Python to the checkout or to this venv."""
    leading = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in leading}


@dataclass(frozen=True)
class Release:
    wheel: Path
    sdist: Path
    venv: Path
    """A new venv the wheel is installed in, with its dependencies at the lock's versions."""
    elsewhere: Path
    """A directory outside the checkout, to run from: nothing is imported from the checkout."""


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """`make dist`'s wheel and sdist, and the wheel installed as a newcomer installs it (its
    dependencies from PyPI, under requirements/test.lock)."""
    root = tmp_path_factory.mktemp("release")
    wheel, sdist = built(root / "dist")
    venv, elsewhere = root / "venv", root / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=patience(120))
    lock = REPO / "requirements" / "test.lock"
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(wheel), "-c", str(lock)],
        cwd=elsewhere,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=patience(600),
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return Release(wheel, sdist, venv, elsewhere)


def run_installed(release: Release, *argv: str) -> str:
    """A program of the venv, run outside the checkout: its standard output."""
    done = subprocess.run(
        [str(release.venv / "bin" / argv[0]), *argv[1:]],
        cwd=release.elsewhere,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=patience(60),
        check=True,
    )
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_sdist_and_the_wheel_hold_the_packs_and_the_console(release: Release) -> None:
    assert release.wheel.name == f"mendpoint-{__version__}-py3-none-any.whl"
    assert release.sdist.name == f"mendpoint-{__version__}.tar.gz"
    shipped = shipped_files()
    assert "spring-boot.yaml" in shipped["mappings"] and "console.js" in shipped["static"]
    assert "fixtures/spring-boot.yaml" in shipped["mappings"]
    top = f"mendpoint-{__version__}/"
    with tarfile.open(release.sdist) as sdist:
        names = set(sdist.getnames())
    assert {top + "mappings/" + name for name in shipped["mappings"]} <= names
    static = {f"gateway/serve/console/static/{name}" for name in shipped["static"]}
    assert {top + name for name in static} <= names
    assert {top + "CHANGELOG.md", top + "README.md", top + "pyproject.toml"} <= names
    assert not [name for name in names if name.startswith(top + "tests/")]
    with zipfile.ZipFile(release.wheel) as wheel:
        held = set(wheel.namelist())
    assert {"gateway/mappings/" + name for name in shipped["mappings"]} | static <= held
    metadata = wheel_metadata(release.wheel)
    assert f"Version: {__version__}" in metadata.splitlines()


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(f"mendpoint-{__version__}.dist-info/METADATA").decode()


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_the_wheel_serves_from_a_clean_venv(
    release: Release, tmp_path: Path, start_upstream: StartUpstream
) -> None:
    """`mendpoint serve --upstream` of the installed wheel, run outside the checkout: a shipped
    pack (builtin:spring-boot) classifies a real upstream's error and the console's assets
    are served, both from the wheel."""
    where = run_installed(release, "python", "-c", "import gateway; print(gateway.__file__)")
    location = Path(where.strip())
    assert location.is_relative_to(release.venv) and not location.is_relative_to(REPO), where
    assert run_installed(release, "mendpoint", "--version") == f"mendpoint {__version__}\n"

    async def spring(request: web.Request) -> web.Response:
        return web.json_response(SPRING_400, status=400)

    app = web.Application()
    app.router.add_post("/v1/orders", spring)
    upstream = await start_upstream(app)
    listen, admin = (f"127.0.0.1:{free_port()}" for _ in range(2))
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(release.venv / "bin" / "mendpoint"),
            *("serve", "--upstream", upstream, "--listen", listen, "--admin", admin),
            cwd=release.elsewhere,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + patience(30)
            while True:
                assert process.returncode is None, log_path.read_text()
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with session.get(f"http://{admin}/readyz") as ready:
                        if ready.status == 200:
                            break
                assert time.monotonic() < deadline, "the installed gateway never got ready"
                await asyncio.sleep(0.1)
            async with session.post(
                f"http://{listen}/v1/orders", headers={"X-Error-Format": "envelope"}, json={}
            ) as answer:
                assert answer.status == 400
                body = await answer.json()
            async with session.get(f"http://{admin}/ui/static/console.js") as asset:
                assert asset.status == 200
                script = await asset.read()
        assert body["error"]["code"] == "MISSING_PARAMETER"
        assert body["meta"]["rule"] == "spring-boot-missing-parameter"  # builtin:spring-boot
        fix = "Send the 'quantity' request parameter, then reissue"
        assert body["error"]["fix_required"] == fix
        assert script == (PACKAGE / "serve" / "console" / "static" / "console.js").read_bytes()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=patience(30)) == 0
    assert "Traceback" not in log_path.read_text()
