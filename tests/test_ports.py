"""The suite's port picker (tests/support/ports.py): ports outside the kernel's ephemeral
range, a slice per xdist worker, free when handed out."""

from __future__ import annotations

import socket

import pytest

from tests.support import ports


def test_a_port_is_below_the_ephemeral_range_and_free() -> None:
    port = ports.free_port()
    assert ports.LOWEST <= port < ports._ephemeral_low()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises if anything held it


def test_a_port_in_use_is_skipped_and_the_next_ones_differ() -> None:
    picked = [ports.free_port() for _ in range(50)]
    assert len(set(picked)) == 50  # in turn: a port just released is not handed out again
    with socket.socket() as held:
        held.bind(("127.0.0.1", picked[-1] + 1))  # the next candidate unless the slice wraps
        held.listen()
        assert not ports._unused(picked[-1] + 1)  # what the picker skips on
        assert ports.free_port() != picked[-1] + 1


def test_two_workers_never_share_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = ports._worker_slice()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = ports._worker_slice()
    assert first.stop <= second.start and len(first) == len(second) > 1000
    assert second.stop <= ports._ephemeral_low()
