"""The Debian-packaged programs the tests run for real (nginx, haproxy, redis-server, chromium,
chromedriver). tests/setup/system-packages.sh installs them and `make test` runs it first, so a
test that needs one fails, by name, where it is missing: it never skips, since a skipped test
would pass CI without proving its behaviour (docs/development.md#system-packages)."""

from __future__ import annotations

import os
import shutil

import pytest

# sbin is not on every user's PATH; nginx and haproxy are installed there.
_SBIN = ("/usr/sbin", "/usr/local/sbin")


def find_program(name: str) -> str | None:
    """Where `name` is: on the PATH, else in an sbin directory; None if nowhere."""
    return shutil.which(name) or next(
        (path for d in _SBIN if os.access(path := os.path.join(d, name), os.X_OK)), None
    )


def system_program(name: str) -> str:
    """The path of `name`, one of tests/setup/system-packages.sh's programs; fails the calling
    test, saying how to install it, where it is missing."""
    path = find_program(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run tests/setup/system-packages.sh as root"
            " (`make test` does)",
            pytrace=False,
        )
    return path
