"""The supervisor's handle on one worker process, and how it restarts one that exits.

A worker that exits quickly again and again is restarted after a back-off that doubles (0.5 s,
1 s, 2 s … at most 30 s), so a crash loop does not spin; one that ran `STABLE_S` starts afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from dataclasses import dataclass, field

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_S = 10.0  # a worker that ran this long before exiting starts a fresh back-off


@dataclass(eq=False)
class Worker:
    """The supervisor's handle on one running worker process and its end of the link."""

    index: int
    process: asyncio.subprocess.Process
    writer: asyncio.StreamWriter
    started: float
    attached: bool = False  # it has spoken: its signal handlers are installed
    ready: bool = False
    hup_pending: bool = False
    asks: dict[int, asyncio.Future[object]] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signum)

    def send(self, message: dict[str, object]) -> None:
        if not self.writer.is_closing():
            self.writer.write(json.dumps(message).encode() + b"\n")


def describe_exit(code: int | None) -> str:
    if code is None:
        return "could not start"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


def backoff_s(streak: int) -> float:
    """Before restart number `streak` in a row of quick exits: 0.5 s, 1 s, 2 s … at most 30 s."""
    return float(min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, streak - 1)))
