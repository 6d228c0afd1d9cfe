"""tests/setup/system-packages.sh and the tests that run its programs agree: every program on
its list is where system_program looks, the script is a no-op once they are, and a missing
program fails the test that needs it instead of skipping it
(docs/development.md#system-packages)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.paths import TESTS
from tests.support.system import find_program, system_program

SCRIPT = TESTS / "setup" / "system-packages.sh"


def listed_programs() -> list[str]:
    """The first word of each line of the script's `programs=( ... )` list."""
    block = re.search(r"^programs=\(\n(.*?)^\)", SCRIPT.read_text(), re.M | re.S)
    assert block is not None, "no programs=( ... ) list in the script"
    return [line.split()[0] for line in re.findall(r'^\s+"([^"]+)"', block[1], re.M)]


def test_the_list_names_the_programs_the_issues_need() -> None:
    assert {"nginx", "haproxy", "redis-server", "chromium", "chromedriver"} <= set(
        listed_programs()
    )


@pytest.mark.parametrize("program", listed_programs())
def test_every_listed_program_is_installed(program: str) -> None:
    """`make test` ran the script first, so each one is there to be found."""
    assert find_program(program) is not None, f"{program}: run {SCRIPT} as root"


def test_the_script_does_nothing_when_all_are_there() -> None:
    done = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_missing_program_fails_the_test_that_needs_it() -> None:
    with pytest.raises(
        pytest.fail.Exception,
        match=r"no-such-program is not installed: run tests/setup/system-packages\.sh",
    ):
        system_program("mendpoint-no-such-program")
    assert system_program("nginx") == find_program("nginx")
