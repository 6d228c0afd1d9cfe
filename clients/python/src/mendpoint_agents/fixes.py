"""Running a failure's `fix_command`, for callers who opt in (`Policy(run_fix=...)`).

The gateway writes only commands from its config's registry, which refuses shell syntax,
placeholders, destructive commands and programs not declared as companions (docs/rules.md,
`commands`). The command still runs on the caller's machine, so nothing runs unless the
caller passes a runner; `run_fix_command` is one, and `allowing` narrows it to programs the
caller names.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Collection

FixRunner = Callable[[str], bool]
"""Runs one `fix_command`; True when it succeeded (the call is then made again, once)."""


def run_fix_command(command: str, timeout_s: float = 60.0) -> bool:
    """The command as its words, without a shell; True when it exits 0 within `timeout_s`."""
    try:
        done = subprocess.run(
            shlex.split(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def allowing(programs: Collection[str], timeout_s: float = 60.0) -> FixRunner:
    """`run_fix_command` for commands whose program is one of `programs`; others fail."""

    def run(command: str) -> bool:
        words = shlex.split(command)
        if not words or words[0] not in programs:
            return False
        return run_fix_command(command, timeout_s)

    return run
