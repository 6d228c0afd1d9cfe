"""The fleet store's share of the `error-32` workload, in process: the gateway's CPU µs per
failure with a store, and without one (the book alone).

error-32's shape: 32 connections of one caller sending the same bad request, so every failure
is kept under one key, and the book seldom matches the next one locally (it began before this
one was answered): each failure is one `open` that settles the one before it in the store.
Failures are settled in bursts of 64, the store's sender and subscription running between
bursts as they do between requests, against a private redis-server (Debian's) on loopback.
CPU is this process's own (`time.process_time`), so Redis's work is not in it: the figure is
what a failure costs the gateway's event loop, finer than the benchmark's CPU per request
(whose rounds differ by more than one lever moves it).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gateway.config.fleet_model import FleetSpec
from gateway.config.models import FollowupsSpec
from gateway.config.session_keys import SessionKeys
from gateway.feedback.fleet_scripts import SCRIPTS
from gateway.feedback.followups import Answered, Attempt, FollowupBook
from gateway.feedback.shared import SharedTracking
from gateway.feedback.store import FleetStore
from tests.support.fleet import RedisServer
from tests.support.ports import free_port

BAD = Answered(400, "VALIDATION_FAILED", "pack.validation", False, None)
BURST = 64
KEY = "0" * 32


async def connected(url: str) -> tuple[FollowupBook, FleetStore]:
    """A book joined to a store at `url`, once the store is up and its events heard."""
    book = FollowupBook(FollowupsSpec(window_s=60), origin=1)
    spec = FleetSpec(redis=url, key_prefix="fleet-path", key_file="unread: the keys below")
    store = FleetStore(spec, None, SCRIPTS, SessionKeys.from_secrets([secrets.token_hex(32)]))
    shared = SharedTracking(store, book, 200, frozenset({"api"}))
    book.shared = shared
    await store.start(shared.received)
    while True:
        if store.up and store.subscribed:
            return book, store
        await asyncio.sleep(0.01)


async def behind(store: FleetStore | None, at_most: int) -> None:
    """Until the store's sender is at most `at_most` writes behind."""
    while store is not None:
        if store.waiting <= at_most:
            return
        await asyncio.sleep(0.0005)


async def cpu_us(url: str | None, failures: int) -> float:
    """CPU µs per failure settled into a book, with a store at `url` (None: without one),
    counting until the store has answered every write."""
    if url is None:
        book, store = FollowupBook(FollowupsSpec(window_s=60), origin=1), None
    else:
        book, store = await connected(url)
    try:
        started = time.process_time()
        for n in range(failures):
            book.settle(Attempt(KEY, "same", "api", time.monotonic()), BAD, f"req-{n}", None)
            if n % BURST == BURST - 1:
                await asyncio.sleep(0)
                await behind(store, 2 * BURST)  # a sender never more than a burst behind
        await behind(store, 0)
        await asyncio.sleep(0.05)  # the last batch's events, heard back
        return (time.process_time() - started) / failures * 1e6
    finally:
        if store is not None:
            await store.close()


async def measure(failures: int, rounds: int) -> dict[str, float]:
    """Median µs per failure, store on and off, in alternating rounds."""
    with tempfile.TemporaryDirectory(prefix="mendpoint-fleet-path-") as tmp:
        redis = RedisServer(free_port(), Path(tmp))
        await redis.start()
        try:
            on, off = [], []
            for _ in range(rounds):
                on.append(await cpu_us(redis.url, failures))
                off.append(await cpu_us(None, failures))
        finally:
            await redis.stop()
    return {"store on": statistics.median(on), "store off": statistics.median(off)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--failures", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = asyncio.run(measure(args.failures, args.rounds))
    for name, value in rows.items():
        print(f"{name:10} {value:6.1f} µs per failure")
    print(f"{'the store':10} {rows['store on'] - rows['store off']:6.1f} µs per failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
