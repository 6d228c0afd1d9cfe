"""`--baseline REV`: every Mendpoint system a second time, from another commit's code.

REV is checked out as a detached git worktree under `bench/results/` (git-ignored), and its
gateway runs on this venv's interpreter and packages with `PYTHONPATH` at that tree, so the
two revisions meet the same dependencies, config, upstream and load, interleaved in one run:
a ratio between `mendpoint-additive` and `mendpoint-additive@REV` is as fair as one between
two systems of the same run. `PYTHONSAFEPATH` keeps the working directory (this checkout)
off the path, and before anything is measured every package of the tree's pyproject is
imported that way and must come from the tree, so a row named `@REV` never runs this
checkout's code by accident.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("bench") / "results"  # in the repository: git-ignored, skipped by mypy
SEPARATOR = "@"

Command = Callable[[str, int, Path], list[str]]


@dataclass(frozen=True)
class Baseline:
    label: str  # the short commit hash: the suffix of the twin rows, `mendpoint-additive@LABEL`
    commit: str
    tree: Path  # the worktree
    import_root: Path  # where its packages import from (the tree, or its src/)

    def env(self) -> tuple[str, ...]:
        return (f"PYTHONPATH={self.import_root}", "PYTHONSAFEPATH=1")

    def twin(self, name: str) -> str:
        return f"{name}{SEPARATOR}{self.label}"

    def wrap(self, command: Command) -> Command:
        """The same command line, run on this revision's code."""

        def run(upstream: str, port: int, root: Path) -> list[str]:
            return ["env", *self.env(), *command(upstream, port, root)]

        return run


def base_name(system: str) -> str:
    """The system a twin row measures (`mendpoint-additive@a4b8b00` → `mendpoint-additive`)."""
    return system.partition(SEPARATOR)[0]


def revision_of(system: str) -> str | None:
    _, sep, label = system.partition(SEPARATOR)
    return label if sep else None


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def prepare(rev: str, repo: Path = ROOT) -> Baseline:
    """The worktree of `rev` (made once, reused while it is unchanged), checked importable."""
    try:
        commit = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo)
    except RuntimeError:
        raise RuntimeError(f"--baseline {rev}: not a commit of {repo}") from None
    label = _git("rev-parse", "--short", commit, cwd=repo)
    tree = repo / RESULTS / f"baseline-{label}"
    if not tree.exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        _git("worktree", "prune", cwd=repo)
        _git("worktree", "add", "--detach", str(tree), commit, cwd=repo)
    head = _git("rev-parse", "HEAD", cwd=tree)
    changed = _git("status", "--porcelain", "--untracked-files=no", cwd=tree)
    if head != commit or changed:
        raise RuntimeError(
            f"{tree} is not a clean checkout of {commit} (HEAD {head}); remove it with "
            f"`git worktree remove --force {tree}` and run again"
        )
    packages, import_root = _link_packages(tree)
    baseline = Baseline(label, commit, tree, import_root)
    _check_imports(baseline, packages, repo)
    return baseline


def _link_packages(tree: Path) -> tuple[list[str], Path]:
    """Make the tree importable as its wheel lays it out: a package the pyproject maps to
    another directory (`gateway.mappings` = `mappings/`) gets a symlink where its name says
    it is (untracked, so the checkout stays clean). The editable install of this checkout
    cannot serve: its finder maps those names to this checkout's directories."""
    pyproject = tree / "pyproject.toml"
    setuptools = tomllib.loads(pyproject.read_text()).get("tool", {}).get("setuptools", {})
    package_dir: dict[str, str] = setuptools.get("package-dir", {})
    import_root = tree / package_dir.get("", ".")
    for package, directory in package_dir.items():
        if not package:
            continue
        where = import_root.joinpath(*package.split("."))
        target = tree / directory
        if where.resolve() == target.resolve():
            continue
        if not where.is_symlink():
            where.symlink_to(os.path.relpath(target, where.parent), target_is_directory=True)
        elif where.resolve() != target.resolve():
            raise RuntimeError(f"{where} points at {where.resolve()}, expected {target}")
    packages: list[str] = setuptools.get("packages", [])
    return packages or [p for p in package_dir if p], import_root


def _check_imports(baseline: Baseline, packages: list[str], repo: Path) -> None:
    """Import every package the way the twin rows will (from the repository's directory,
    whose own packages must not leak in) and require each from the tree."""
    probe = (
        "import importlib, json, sys\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    m = importlib.import_module(name)\n"
        "    out[name] = [str(p) for p in getattr(m, '__path__', [m.__file__])]\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, **dict(item.split("=", 1) for item in baseline.env()))
    done = subprocess.run(
        [sys.executable, "-c", probe, *packages],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{baseline.label}: its packages do not import: {done.stderr[-2000:]}")
    found: dict[str, list[str]] = json.loads(done.stdout)
    tree = baseline.tree.resolve()
    elsewhere = {
        name: paths
        for name, paths in found.items()
        if not paths or not all(Path(p).resolve().is_relative_to(tree) for p in paths)
    }
    if elsewhere:
        raise RuntimeError(f"{baseline.label}: packages imported from outside {tree}: {elsewhere}")
