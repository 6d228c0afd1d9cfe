"""What a replica takes from the fleet store is what another replica wrote, of the shape it
wrote it (docs/security.md#fleet-store): a real redis-server, a real gateway process, and
the writes anyone who can reach that Redis could make.

The events channel is believed only when sealed with the fleet key, and even then field by
field; a relay record is an address only when a replica sealed it under its own key; the
store's tallies and outcomes become rows and Prometheus labels only when they have a table's
shape and name this config's routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from gateway.config.fleet_model import FleetSpec
from gateway.config.models import FollowupsSpec
from gateway.config.session_keys import SessionKeys, read_session_keys
from gateway.feedback.fleet_events import seal
from gateway.feedback.fleet_scripts import SCRIPTS
from gateway.feedback.followups import FollowupBook
from gateway.feedback.shared import SharedTracking
from gateway.feedback.store import SEP, FleetStore, Keys
from gateway.mcp.bridge_replicas import ReplicaDirectory
from gateway.telemetry.metrics import REGISTRY
from tests.support.fleet import GatewayProcess, RedisServer, fleet_key, sample
from tests.support.gateway import route_config
from tests.support.ports import free_port
from tests.support.waits import patience

pytestmark = pytest.mark.timeout(120)

PREFIX = "trust"
CHANNEL = Keys(PREFIX).events
FORGER = "0123456789abcdef"  # a replica name no process of the fleet has
REJECTED = "mendpoint_fleet_rejected_total"


async def unavailable(request: web.Request) -> web.Response:
    return web.json_response({"error": "try again later"}, status=503)


@pytest.fixture
async def replica(tmp_path: Path, redis_server: RedisServer) -> AsyncIterator[GatewayProcess]:
    app = web.Application()
    app.router.add_get("/orders/{id}", unavailable)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    gateway = GatewayProcess("a", free_port(), free_port(), tmp_path / "a")
    config = route_config(f"http://127.0.0.1:{port}", name="orders") | {
        "followups": {"window_s": 30},
        "fleet": {"redis": redis_server.url, "key_prefix": PREFIX, "key_file": fleet_key(tmp_path)},
        "log": {"access": False},
        "shutdown": {"drain_delay_s": 0, "grace_s": 3},
    }
    try:
        await gateway.start(config)
        await until_subscribed(redis_server)
        yield gateway
    finally:
        await gateway.stop()
        await runner.cleanup()


async def until_subscribed(redis_server: RedisServer) -> None:
    deadline = time.monotonic() + patience(20)
    while await redis_server.subscribers(CHANNEL) < 1:
        assert time.monotonic() < deadline, "the replica never subscribed to its events"
        await asyncio.sleep(0.05)


async def until_rejected(replica: GatewayProcess, at_least: float, **labels: str) -> float:
    deadline = time.monotonic() + patience(15)
    while True:
        seen = sample(await replica.metrics(), REJECTED, **labels)
        if seen >= at_least:
            return seen
        assert time.monotonic() < deadline, f"{labels}: {seen} counted, wanted {at_least}"
        await asyncio.sleep(0.05)


async def get(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url) as answer:
        await answer.read()
        return answer.status


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_a_forged_event_is_dropped_counted_and_breaks_no_retry(
    replica: GatewayProcess, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A failure's own event, copied with `retry_after_ms: "soon"`, published as anyone who
    can reach the Redis can (unsealed), and sealed (as a stored record read back would be):
    neither is applied, each is counted, and the caller's retry is answered as the first
    attempt was. On main the copy was applied and the retry was aiohttp's plain 500."""
    client = aioredis.Redis(port=redis_server.port, decode_responses=True)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(CHANNEL)
    url = replica.base + "/orders/1"
    try:
        first = await get(url)
        assert first == 503
        message = None
        deadline = time.monotonic() + patience(10)
        while message is None:
            assert time.monotonic() < deadline, "the failure was never published"
            message = await pubsub.get_message(timeout=0.5)
        events = json.loads(message["data"].rpartition(SEP)[2])
        entry = events[0]["entry"]
        forged = entry | {
            "retry_after_ms": "soon",
            "retryable": True,
            "request_id": "forged-1",
            "answered_wall_ms": round(time.time() * 1000),
        }
        body = FORGER + SEP + json.dumps([{"op": "open", "from": FORGER, "entry": forged}])
        await client.publish(CHANNEL, body)  # the format main applied
        keys = read_session_keys(fleet_key(tmp_path))
        await client.publish(CHANNEL, seal(keys, "events", body))
        hints = {"op": "hints", "from": FORGER, "route": "orders", "tools": {"rm": {}}}
        await client.publish(CHANNEL, FORGER + SEP + json.dumps([hints]))
        await until_rejected(replica, 2, what="event", reason="unsigned")
        await until_rejected(replica, 1, what="event", reason="bad_field")
        assert await get(url) == first  # the retry, answered as the first was
        other = {"op": "open", "from": FORGER, "entry": entry | {"route": "elsewhere"}}
        await client.publish(CHANNEL, seal(keys, "events", FORGER + SEP + json.dumps([other])))
        await until_rejected(replica, 1, what="event", reason="unknown_route")
        wrong = SessionKeys.from_secrets(["another-fleet-key-" + "0" * 32])
        await client.publish(CHANNEL, seal(wrong, "events", body))
        await until_rejected(replica, 1, what="event", reason="bad_signature")
        stale = seal(keys, "events", body, now_ms=round(time.time() * 1000) - 3_600_000)
        await client.publish(CHANNEL, stale)
        await until_rejected(replica, 1, what="event", reason="stale")
    finally:
        closing: Callable[[], Awaitable[None]] = pubsub.aclose  # unannotated in redis-py
        await closing()
        await client.aclose()


async def test_events_with_megabyte_keys_do_not_grow_a_replica(
    replica: GatewayProcess, redis_server: RedisServer, tmp_path: Path
) -> None:
    """80 events whose key is 1 MB each grew a replica by 156 MiB on main, past a
    `followups.max_bytes` of 16 MiB (only the request id was counted): each is refused."""
    assert replica.process is not None
    keys = read_session_keys(fleet_key(tmp_path))
    client = aioredis.Redis(port=redis_server.port, decode_responses=True)
    before = rss_bytes(replica.process.pid)
    try:
        for n in range(80):
            entry = {
                "key": f"{n:02d}" + "k" * (1 << 20),
                "identity": "0" * 32,
                "request_id": f"big-{n}",
                "route": "orders",
                "code": "UPSTREAM_UNAVAILABLE",
                "rule": "x",
                "retryable": True,
                "retry_after_ms": 0,
                "answered_wall_ms": round(time.time() * 1000),
                "chain_wall_ms": round(time.time() * 1000),
                "started_wall_ms": round(time.time() * 1000),
            }
            event = {"op": "open", "from": FORGER, "entry": entry}
            await client.publish(CHANNEL, seal(keys, "events", FORGER + SEP + json.dumps([event])))
            if n % 8 == 7:  # within Redis's output buffer for a subscriber (8 MB over 60 s)
                await until_rejected(replica, n + 1, what="event", reason="bad_field")
    finally:
        await client.aclose()
    grown = rss_bytes(replica.process.pid) - before
    assert grown < 40 << 20, f"grew {grown >> 20} MiB"
    table = await replica.admin_json("/followups")
    assert all(row.get("open", 0) == 0 for row in table["codes"]), table


async def test_a_tally_that_is_not_a_number_is_skipped_not_a_500(
    replica: GatewayProcess, redis_server: RedisServer
) -> None:
    """/followups answered 500 on main for one non-numeric tally field."""
    tally = Keys(PREFIX).tally
    good = f"orders{SEP}UPSTREAM_UNAVAILABLE{SEP}failures"
    bad = f"orders{SEP}NOT_FOUND{SEP}failures"
    client = aioredis.Redis(port=redis_server.port, decode_responses=True)
    try:
        await client.hset(tally, mapping={good: "3", bad: "lots", f"x y{SEP}Z{SEP}failures": "1"})
    finally:
        await client.aclose()
    table = await replica.admin_json("/followups")  # asserts 200
    assert table["scope"] == "fleet"
    rows = {(row["route"], row["code"]): row for row in table["codes"]}
    assert rows[("orders", "UPSTREAM_UNAVAILABLE")]["failures"] == 3
    assert ("orders", "NOT_FOUND") not in rows
    assert sample(await replica.metrics(), REJECTED, what="tally", reason="bad_field") >= 2


# -- in one process, against the same real redis-server -------------------------------------


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[FleetStore]:
    spec = FleetSpec(redis=redis_server.url, key_prefix="inproc", key_file="unread")
    keys = SessionKeys.from_secrets(["in-process-fleet-key-" + "0123456789" * 4])
    fleet = FleetStore(spec, None, SCRIPTS, keys)
    await fleet.start(lambda event: None)
    deadline = time.monotonic() + patience(10)
    while not fleet.up:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    try:
        yield fleet
    finally:
        await fleet.close()


def rejected(what: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(REJECTED, {"what": what, "reason": reason})
    return value or 0.0


async def test_a_relay_record_counts_only_when_a_replica_sealed_it_under_its_key(
    store: FleetStore,
) -> None:
    """Anyone who could write to the Redis could point a replica's sessions at an address of
    theirs by writing its record: now such a record is no record."""
    directory = ReplicaDirectory(store, "aaaaaaaaaaaaaaaa")
    directory.start("127.0.0.1:8492")
    victim_key = store.keys.relay("aaaaaaaaaaaaaaaa")
    deadline = time.monotonic() + patience(10)
    while (found := await directory.address_of("aaaaaaaaaaaaaaaa")) is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert found == "127.0.0.1:8492"
    await directory.close()
    before = rejected("relay_record", "unsigned"), rejected("relay_record", "bad_signature")
    other = ReplicaDirectory(store, "bbbbbbbbbbbbbbbb")
    await store.redis.set(victim_key, "203.0.113.9:8492", px=5000)  # written by anyone
    assert await other.address_of("aaaaaaaaaaaaaaaa") is None
    # A sealed record copied from another replica's key names no other replica.
    sealed = seal(store.sealing, "relay " + store.keys.relay("cccccccccccccccc"), "10.0.0.9:1")
    await store.redis.set(victim_key, sealed, px=5000)
    other._known.clear()
    assert await other.address_of("aaaaaaaaaaaaaaaa") is None
    after = rejected("relay_record", "unsigned"), rejected("relay_record", "bad_signature")
    assert after == (before[0] + 1, before[1] + 1)


async def test_outcomes_read_from_the_store_become_labels_only_for_this_configs_routes(
    store: FleetStore,
) -> None:
    """A failure written straight into the store under a route no config names is swept as
    abandoned there, but no Prometheus series is made of its route."""
    book = FollowupBook(FollowupsSpec(window_s=1), origin=1)
    shared = SharedTracking(store, book, 8, frozenset({"orders"}))
    now = round(time.time() * 1000)
    for route in ("orders", "made-up-" + "r" * 40):
        key = route[:8].ljust(32, "0")
        entry = {"route": route, "code": "GONE", "answered_wall_ms": now - 5000}
        await store.redis.set(store.keys.open(key), json.dumps(entry))
        await store.redis.zadd(store.keys.due, {key: now - 4000})
    before = rejected("tally", "unknown_route")
    shared.sweep()
    deadline = time.monotonic() + patience(10)
    while rejected("tally", "unknown_route") == before:
        assert time.monotonic() < deadline, "the sweep's answer was never read"
        await asyncio.sleep(0.02)
    labels: dict[str, Any] = {"code": "GONE", "outcome": "abandoned"}
    assert REGISTRY.get_sample_value("mendpoint_followups_total", {"route": "orders", **labels})
    made_up = {"route": "made-up-" + "r" * 40, **labels}
    assert REGISTRY.get_sample_value("mendpoint_followups_total", made_up) is None
    with contextlib.suppress(Exception):
        await store.redis.delete(store.keys.tally)
