"""Two replicas' books on one real redis-server: what one opens the other matches, and each
outcome is counted once however many replicas see it (docs/operations.md#fleet)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.config.fleet_model import FleetSpec
from gateway.config.loader import load_config
from gateway.config.models import FollowupsSpec
from gateway.config.session_keys import SessionKeys
from gateway.failure import TransportKind
from gateway.feedback.fleet_events import unseal
from gateway.feedback.fleet_scripts import SCRIPTS
from gateway.feedback.followups import Answered, Attempt, FollowupBook, digest
from gateway.feedback.shared import OUTCOMES, SharedTracking
from gateway.feedback.signatures import Gap, GapSample, SignatureBook
from gateway.feedback.store import SEP, FleetStore
from gateway.mcp.reported_failures import REPORTED_SUCCESS
from gateway.telemetry.metrics import REGISTRY
from tests.support.fleet import RedisServer, fleet_key
from tests.support.ports import free_port
from tests.support.secrets import write_secret
from tests.support.waits import patience

WINDOW_S = 1.0
Replica = tuple[FollowupBook, SharedTracking, SignatureBook]


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def until(check: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while not check():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


KEYS = SessionKeys.from_secrets(["shared-books-test-key-" + "0123456789abcdef" * 2])


class Clock:
    """The replicas' Unix seconds, moved by a test (both read the same one)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def replicas(
    redis_server: RedisServer, clock: Clock
) -> AsyncIterator[Callable[..., Awaitable[Replica]]]:
    stores: list[FleetStore] = []

    async def make(**fleet: Any) -> Replica:
        book = FollowupBook(FollowupsSpec(window_s=WINDOW_S), origin=len(stores) + 1)
        signatures = SignatureBook(capacity=4, clock=clock)
        spec = FleetSpec(redis=redis_server.url, **({"key_prefix": "t", "key_file": "-"} | fleet))
        store = FleetStore(spec, None, SCRIPTS, KEYS)
        shared = SharedTracking(store, book, signatures.capacity, frozenset({"orders"}))
        book.shared, signatures.shared, shared.gaps_clock = shared, shared.gap, clock
        await store.start(shared.received)
        stores.append(store)
        await until(lambda: store.up and store.subscribed)
        return book, shared, signatures

    yield make
    for store in stores:
        await store.close()


def key_of(name: str) -> str:
    """A key as the request path makes one (a digest): a fleet event carries no other."""
    return digest(name)


def attempt(key: str, identity: str = "same", started: float | None = None) -> Attempt:
    when = time.monotonic() if started is None else started
    return Attempt(key_of(key), digest(identity), "orders", when)


BAD = Answered(400, "BAD_REQUEST", "bad", False, None)
OK = Answered(201)


async def settled_rows(shared: SharedTracking) -> dict[str, Any]:
    rows = await shared.rows()
    return {row["code"]: row for row in rows}


async def test_a_failure_opened_on_one_replica_is_followed_up_on_the_other(
    replicas: Callable[..., Awaitable[Replica]],
) -> None:
    (a, shared_a, _), (b, shared_b, _) = await replicas(), await replicas()
    before = metric(
        "mendpoint_followups_total", route="orders", code="BAD_REQUEST", outcome="recovered"
    )
    a.settle(attempt("k1"), BAD, "req-1", None)
    await until(lambda: b.pending(key_of("k1")) is not None)
    followed = b.pending(key_of("k1"))
    assert followed is not None and followed.request_id == "req-1"
    settled = b.settle(attempt("k1", "fixed"), OK, "req-2", followed)
    assert settled is not None and settled.outcome.value == "recovered"
    await until(lambda: a.pending(key_of("k1")) is None)  # the close reached A too
    await until(lambda: shared_b.store.waiting == 0)
    rows = await settled_rows(shared_a)
    assert rows["BAD_REQUEST"]["failures"] == 1
    assert rows["BAD_REQUEST"]["recovered"] == 1
    assert len(rows["BAD_REQUEST"]["recovery_samples_ms"]) == 1
    # Past the window, neither replica's sweep counts it abandoned: it was settled.
    await asyncio.sleep(WINDOW_S + 0.2)
    a.sweep(), b.sweep()
    await until(lambda: shared_a.store.waiting == 0 and shared_b.store.waiting == 0)
    assert (await settled_rows(shared_b))["BAD_REQUEST"]["abandoned"] == 0
    after = metric(
        "mendpoint_followups_total", route="orders", code="BAD_REQUEST", outcome="recovered"
    )
    assert after - before == 1  # Prometheus: the one replica whose claim won


async def test_a_batch_of_failures_is_one_message_on_the_events_channel(
    replicas: Callable[..., Awaitable[Replica]], redis_server: RedisServer
) -> None:
    """Failures queued together go in one batch and reach the channel as one message, their
    events in order after the sender's id, sealed with the fleet key; the other replica
    applies every one of them."""
    import redis.asyncio as aioredis

    (a, shared_a, _), (b, _, _) = await replicas(), await replicas()
    listener = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    pubsub = listener.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(shared_a.store.keys.events)
    try:
        for n in range(5):  # no await between them: one queue, one flush
            a.settle(attempt(f"batch-{n}"), BAD, f"req-{n}", None)
        await until(lambda: all(b.pending(key_of(f"batch-{n}")) is not None for n in range(5)))
        messages = await published(pubsub)
        assert len(messages) == 1
        opened = unseal(KEYS, "events", messages[0])  # sealed with the fleet key
        sender, _, body = opened.partition(SEP)
        assert sender == shared_a.store.replica  # A drops it unread
        events = json.loads(body)
        assert [e["entry"]["request_id"] for e in events] == [f"req-{n}" for n in range(5)]
        assert {e["from"] for e in events} == {shared_a.store.replica}
    finally:
        closing: Callable[[], Awaitable[None]] = pubsub.aclose  # unannotated in redis-py
        await closing()
        await listener.aclose()


async def test_a_close_the_store_makes_of_its_own_reaches_the_sender_too(
    replicas: Callable[..., Awaitable[Replica]],
) -> None:
    """A success heard of before the failure it follows: the store settles the failure as
    it opens it and tells every replica, the one that opened it included (`from` empty, and
    the message sent with no sender: the opener reads it)."""
    (a, shared_a, _), (b, shared_b, _) = await replicas(), await replicas()
    started = time.monotonic()
    b.settle(attempt("k-early", "fixed", started + 0.05), OK, "req-2", None)
    await until(lambda: shared_b.store.waiting == 0)
    a.settle(attempt("k-early", started=started), BAD, "req-1", None)
    assert a.held_bytes > 0
    await until(lambda: a.held_bytes == 0, timeout_s=WINDOW_S / 2)  # before the window ends
    row = (await settled_rows(shared_a))["BAD_REQUEST"]
    assert (row["failures"], row["recovered"]) == (1, 1)


async def published(pubsub: Any, quiet_s: float = 0.3) -> list[str]:
    """What the channel carried until it was quiet for `quiet_s` (a subscription's own
    confirmation is read as None, and skipped)."""
    texts: list[str] = []
    deadline = time.monotonic() + patience(5)
    while time.monotonic() < deadline:
        message = await pubsub.get_message(timeout=quiet_s)
        if message is None and texts:
            return texts
        if message is not None and message["type"] == "message":
            texts.append(message["data"])
    return texts


async def test_two_replicas_settling_one_failure_count_one_outcome(
    replicas: Callable[..., Awaitable[Replica]],
) -> None:
    (a, shared_a, _), (b, shared_b, _) = await replicas(), await replicas()
    a.settle(attempt("k2"), BAD, "req-1", None)
    await until(lambda: b.pending(key_of("k2")) is not None)
    # The same caller's retry reaches both replicas at once: each matches it locally.
    a.settle(attempt("k2"), BAD, "req-2", a.pending(key_of("k2")))
    b.settle(attempt("k2"), BAD, "req-3", b.pending(key_of("k2")))
    await until(lambda: shared_a.store.waiting == 0 and shared_b.store.waiting == 0)
    row = (await settled_rows(shared_a))["BAD_REQUEST"]
    assert row["failures"] == 3
    # req-1 is claimed once (the other claim finds it settled); req-3, stored after req-2,
    # is req-2's follow-up there; nobody follows req-3.
    assert row["retried_unchanged"] == 2
    await asyncio.sleep(WINDOW_S + 0.1)
    a.sweep()
    await until(lambda: shared_a.store.waiting == 0)
    row = (await settled_rows(shared_b))["BAD_REQUEST"]
    outcomes = sum(v for k, v in row.items() if k in OUTCOMES)
    assert (row["abandoned"], outcomes) == (1, 3)  # each failure exactly one outcome


async def test_a_failure_nobody_follows_up_is_abandoned_once_fleet_wide(
    replicas: Callable[..., Awaitable[Replica]],
) -> None:
    (a, shared_a, _), (b, shared_b, _) = await replicas(), await replicas()
    a.settle(attempt("k3"), BAD, "req-1", None)
    await until(lambda: b.pending(key_of("k3")) is not None)
    await asyncio.sleep(WINDOW_S + 0.1)
    for _ in range(3):  # every replica sweeps, several times
        a.sweep(), b.sweep()
        await until(lambda: shared_a.store.waiting == 0 and shared_b.store.waiting == 0)
    row = (await settled_rows(shared_b))["BAD_REQUEST"]
    assert (row["failures"], row["abandoned"]) == (1, 1)


async def test_gaps_are_one_bounded_table_for_the_fleet(
    replicas: Callable[..., Awaitable[Replica]],
) -> None:
    (_, shared_a, gaps_a), (_, shared_b, gaps_b) = await replicas(), await replicas()
    for _ in range(3):
        gaps_a.record("orders", "400", "qty 5 must be positive")
    gaps_b.record("orders", "400", "qty 7 must be positive")
    for text in ("one", "two", "three", "four"):  # past the capacity of 4
        gaps_b.record("orders", "409", text)
    await until(lambda: shared_a.store.waiting == 0 and shared_b.store.waiting == 0)
    ranked = await shared_a.gaps(10, 900)
    assert ranked == await shared_b.gaps(10, 900)
    assert len(ranked) == 4
    top = ranked[0]
    assert (top.signature.route, top.signature.status, top.signature.text, top.count) == (
        "orders",
        "400",
        "qty # must be positive",
        4,
    )


async def test_fleet_gaps_count_per_window_keep_a_sample_and_reset(
    replicas: Callable[..., Awaitable[Replica]], clock: Clock
) -> None:
    """The window, the sample and the reset, as one process's book has them, for the fleet:
    buckets in Redis (each a sorted set that expires), samples in a hash."""
    (_, shared_a, gaps_a), (_, shared_b, gaps_b) = await replicas(), await replicas()
    kept = GapSample("GET", "/orders/5", 400, None, (), '{"m": "qty 5"}', False, "qty 5")
    gaps_a.record("orders", "400", "qty 5 must be positive", lambda: kept)
    gaps_a.record("orders", "400", "qty 6 must be positive")
    clock.now += 600
    gaps_b.record("orders", "400", "qty 7 must be positive")
    gaps_b.record("orders", "409", "taken")
    await until(lambda: shared_a.store.waiting == 0 and shared_b.store.waiting == 0)

    def counts(found: list[Gap]) -> dict[str, int]:
        return {gap.signature.status: gap.count for gap in found}

    assert counts(await shared_a.gaps(10, 300)) == {"400": 1, "409": 1}
    fleet = await shared_b.gaps(10, 900)
    assert counts(fleet) == {"400": 3, "409": 1}
    assert fleet[0].sample == kept  # taken on replica a, read on replica b
    assert fleet[1].sample is None  # recorded with none
    clock.now += 1000
    assert await shared_a.gaps(10, 900) == []
    assert counts(await shared_a.gaps(10, 3600)) == {"400": 3, "409": 1}
    await shared_b.reset_gaps()
    assert await shared_a.gaps(10, 10_800) == []


async def test_a_sample_in_the_store_that_no_replica_wrote_is_dropped_and_counted(
    replicas: Callable[..., Awaitable[Replica]], redis_server: RedisServer
) -> None:
    """A sample is read from the store as every store row is: checked, not trusted."""
    _, shared, gaps = await replicas()
    gaps.record("orders", "400", "qty 5 must be positive")
    await until(lambda: shared.store.waiting == 0)
    member = json.dumps(["orders", "400", "qty # must be positive"])
    before = metric("mendpoint_fleet_rejected_total", what="gap", reason="malformed")
    forged = json.dumps({"method": "GET", "path": "/", "status": 400, "transport": None,
                         "headers": {}, "body": "x" * 100_000, "message": "m"})  # fmt: skip
    await redis_server.command("HSET", "{t}:gaps:samples", member, forged)
    (gap,) = await shared.gaps(10, 900)
    assert gap.count == 1 and gap.sample is None
    assert metric("mendpoint_fleet_rejected_total", what="gap", reason="malformed") == before + 1


async def test_a_store_that_stops_answering_degrades_and_resumes(
    replicas: Callable[..., Awaitable[Replica]], redis_server: RedisServer
) -> None:
    a, shared_a, _ = await replicas(timeout_ms=200)
    before = metric("mendpoint_fleet_store_degraded_total")
    assert redis_server.process is not None
    redis_server.process.send_signal(19)  # SIGSTOP: connections stay open, nothing answers
    try:
        started = time.monotonic()
        a.settle(attempt("k4"), BAD, "req-1", None)  # the request path: never waits
        assert time.monotonic() - started < 0.05
        await until(lambda: not shared_a.store.up)
        assert metric("mendpoint_fleet_store_degraded_total") == before + 1
        assert shared_a.store.waiting >= 1  # kept for the store's return
    finally:
        redis_server.process.send_signal(18)  # SIGCONT
    await until(lambda: shared_a.store.up and shared_a.store.waiting == 0)
    row = (await settled_rows(shared_a))["BAD_REQUEST"]
    assert row["failures"] == 1  # replayed once, even if the stalled write also ran


async def test_the_password_comes_from_its_file_and_a_wrong_one_is_a_store_down(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "locked"
    directory.mkdir()
    locked = RedisServer(free_port(), directory, password="s3cret-password-of-a-fleet")
    await locked.start()
    try:
        assert await store_up_with(tmp_path, locked, "s3cret-password-of-a-fleet")
        assert not await store_up_with(tmp_path, locked, "wrong-password-entirely")
    finally:
        await locked.stop()


async def store_up_with(tmp_path: Path, redis: RedisServer, password: str) -> bool:
    """Whether a store configured with `password` in its password_file connects."""
    write_secret(tmp_path / "password", password + "\n")
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "routes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n"
        f"fleet: {{redis: '{redis.url}', password_file: password, timeout_ms: 500,"
        f" key_file: '{fleet_key(tmp_path)}'}}\n"
    )
    loaded = load_config(str(config))
    assert loaded.fleet_password == password
    assert password not in repr(loaded)
    assert loaded.config.fleet is not None
    assert loaded.fleet_keys is not None
    store = FleetStore(loaded.config.fleet, loaded.fleet_password, SCRIPTS, loaded.fleet_keys)
    await store.start(lambda event: None)
    try:
        with contextlib.suppress(AssertionError):
            await until(lambda: store.up, timeout_s=3)  # a ping every second: three chances
        return store.up
    finally:
        await store.close()


async def test_an_idle_store_that_dies_is_found_again(
    replicas: Callable[..., Awaitable[Replica]], redis_server: RedisServer
) -> None:
    """Nothing to send when the subscription drops: the prober still finds the store again."""
    _, shared, _ = await replicas()
    await redis_server.stop()
    await until(lambda: not shared.store.up)
    await redis_server.start()  # a new, empty Redis on the same address
    await until(lambda: shared.store.up and shared.store.subscribed)
    shared.book.settle(attempt("k5"), BAD, "req-1", None)
    await until(lambda: shared.store.waiting == 0)
    assert (await settled_rows(shared))["BAD_REQUEST"]["failures"] == 1  # scripts loaded anew


async def test_every_kind_of_signature_the_gateway_writes_is_kept_by_the_fleet(
    replicas: Callable[..., Awaitable[Replica]],
) -> None:
    """A status, an MCP failure, each transport fault and a result reported as a success:
    all are read back from the store (a transport fault's kind once passed its bound)."""
    (_, shared_a, gaps_a), (_, shared_b, _) = await replicas(), await replicas()
    kinds = [
        "400",
        "mcp",
        REPORTED_SUCCESS,
        *(f"transport:{kind.value}" for kind in TransportKind),
    ]
    for start in range(0, len(kinds), gaps_a.capacity):  # the fleet's table holds four here
        batch = kinds[start : start + gaps_a.capacity]
        for kind in batch:
            gaps_a.record("orders", kind, "it failed")
        await until(lambda: shared_a.store.waiting == 0)
        found = await shared_b.gaps(len(batch), 900)
        assert sorted(gap.signature.status for gap in found) == sorted(batch)
        await shared_b.reset_gaps()
