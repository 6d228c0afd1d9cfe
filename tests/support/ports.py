"""Loopback ports for the processes the tests and the benchmark start, picked so that nothing
else takes them between the pick and the bind.

`bind(("127.0.0.1", 0))` hands out a port from the kernel's ephemeral range: the range every
outgoing connection takes its source port from. Under the suite's load a client socket could
take that port between the pick and the moment the started process bound it (CI once saw the
benchmark's bare proxy exit with "Address already in use"), and two pytest-xdist workers could
pick the same one. Ports here come from below the ephemeral range, from a slice of their own
per xdist worker, in turn (a port just released is not handed out again soon), and only after
a bind shows nothing holds them.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

LOWEST = 10_000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _worker_slice() -> range:
    """This xdist worker's share of [LOWEST, ephemeral low); the whole of it outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker) if worker.isdigit() else 0
    width = (_ephemeral_low() - LOWEST) // max(count, 1)
    start = LOWEST + index * width
    return range(start, start + width)


def _candidates(ports: range) -> Iterator[int]:
    offset = random.randrange(len(ports))  # two runs side by side rarely walk in step
    return (ports[(offset + i) % len(ports)] for i in itertools.count())


_SLICE = _worker_slice()
_NEXT = _candidates(_SLICE)


def _unused(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on or connects from now, and none will take from the
    kernel's ephemeral pool (also a closed port: connecting to it is refused)."""
    for port in itertools.islice(_NEXT, len(_SLICE)):
        if _unused(port):
            return port
    raise OSError(f"every loopback port in {_SLICE} is in use")
