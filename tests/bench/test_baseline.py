"""`make bench --baseline REV` (bench/baseline.py): a real git repository with two commits, a
package laid out the way the gateway's is (one subpackage mapped to a top-level directory, as
`gateway.mappings` is to `mappings/`), checked out as a worktree and run the way the twin rows
run it; the plan and the report around the twins (docs/performance.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import ratios, report
from bench.baseline import Baseline, base_name, prepare, revision_of
from bench.systems import systems

PYPROJECT = """\
[tool.setuptools]
packages = ["shop", "shop.data"]
package-dir = { "shop" = "shop", "shop.data" = "data" }
"""
X = ratios.TIMES
MAIN = "import shop, shop.data\nprint(shop.VERSION, shop.__file__, *shop.data.__path__)\n"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, version: str) -> str:
    (repo / "shop" / "__init__.py").write_text(f"VERSION = {version!r}\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", version)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "shop").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "data" / "__init__.py").write_text("")
    (root / "shop" / "__main__.py").write_text(MAIN)
    (root / "pyproject.toml").write_text(PYPROJECT)
    git(root, "init", "-q")
    return root


def run_twin(baseline: Baseline, repo: Path) -> list[str]:
    """The package's `-m` entry as a twin row starts it, from the repository's directory."""
    command = baseline.wrap(lambda _u, _p, _r: [sys.executable, "-m", "shop"])
    argv = command("http://127.0.0.1:9", 0, repo)
    done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.split()


def test_the_twin_runs_the_old_commits_code_and_its_mapped_package(repo: Path) -> None:
    old = commit(repo, "old")
    commit(repo, "new")
    baseline = prepare(old[:10], repo)
    assert baseline.commit == old
    assert baseline.tree == repo / "bench" / "results" / f"baseline-{baseline.label}"
    version, module, data = run_twin(baseline, repo)
    tree = baseline.tree.resolve()
    assert version == "old"
    assert Path(module).resolve().is_relative_to(tree)
    assert Path(data).resolve() == tree / "data"
    # The same command line without the twin's environment runs the repository's own code.
    argv = [sys.executable, "-c", "import shop; print(shop.VERSION)"]
    plain = subprocess.run(argv, cwd=repo, capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == "new"
    assert prepare(old, repo) == baseline  # the worktree is reused


def test_a_changed_checkout_is_refused(repo: Path) -> None:
    old = commit(repo, "old")
    baseline = prepare(old, repo)
    (baseline.tree / "shop" / "__init__.py").write_text("VERSION = 'edited'\n")
    with pytest.raises(RuntimeError, match="not a clean checkout"):
        prepare(old, repo)


def test_a_package_that_does_not_come_from_the_tree_is_refused(repo: Path) -> None:
    # `json` is not in the tree: it imports from the standard library, not from the checkout.
    (repo / "pyproject.toml").write_text(PYPROJECT.replace('"shop.data"]', '"shop.data", "json"]'))
    old = commit(repo, "old")
    with pytest.raises(RuntimeError, match="outside"):
        prepare(old, repo)


def test_an_unknown_revision_is_named(repo: Path) -> None:
    commit(repo, "old")
    with pytest.raises(RuntimeError, match="no-such-rev: not a commit"):
        prepare("no-such-rev", repo)


def test_every_mendpoint_system_but_the_bridge_gets_a_twin_after_it(tmp_path: Path) -> None:
    baseline = Baseline("abc1234", "abc1234" + "0" * 33, tmp_path, tmp_path)
    names = list(systems(baseline))
    for name in systems():
        twin = f"{name}@abc1234"
        if name.startswith("mendpoint-") and name != "mendpoint-bridge":
            assert names[names.index(name) + 1] == twin
            assert base_name(twin) == name and revision_of(twin) == "abc1234"
        else:
            assert twin not in names
    plain = systems()["mendpoint-additive"]
    twinned = systems(baseline)["mendpoint-additive@abc1234"]
    assert plain is not None and twinned is not None
    argv = plain("http://127.0.0.1:9", 8000, tmp_path)
    assert twinned("http://127.0.0.1:9", 8000, tmp_path) == ["env", *baseline.env(), *argv]


def test_the_report_sets_each_system_beside_its_twin() -> None:
    def m(rps: float, p50: float, cpu: float) -> dict[str, float | None]:
        return {
            "rps": rps,
            "p50_ms": p50,
            "p99_ms": p50,
            "rss_mib": 50.0,
            "cpu_us_per_request": cpu,
        }

    medians = {
        "ok-32": {
            "bare": m(1000, 1, 100),
            "mendpoint-additive": m(900, 1, 110),
            "mendpoint-additive@abc1234": m(1000, 1, 100),
        },
        "ok-1": {
            "bare": m(1000, 0.2, 100),
            "mendpoint-additive": m(900, 0.25, 110),
            "mendpoint-additive@abc1234": m(1000, 0.2, 100),
        },
    }
    table = report.table(medians).splitlines()
    assert table[0] == "| workload | bare | additive | additive@abc1234 |"
    rows = report.baseline_table(medians).splitlines()[2:]
    assert rows == [
        f"| ok-32 | additive | 1,000/s → 900/s | 0.90{X} | 100 → 110 µs | 1.10{X} |",
        f"| ok-1 | additive | 0.200 ms → 0.250 ms | 1.25{X} | 100 → 110 µs | 1.10{X} |",
    ]
