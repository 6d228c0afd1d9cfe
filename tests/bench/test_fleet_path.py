"""bench/fleet_path.py measures what docs/performance.md says: the fleet store's CPU per
failure on error-32's shape, every failure written (none dropped) and counted once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis

from bench import fleet_path
from gateway.feedback.store import SEP, Keys
from tests.support.fleet import RedisServer
from tests.support.ports import free_port

Tally = dict[str, str]


def test_every_failure_reaches_the_store_and_each_settles_the_one_before(tmp_path: Path) -> None:
    server = RedisServer(free_port(), tmp_path)

    async def run() -> tuple[float, float, Tally]:
        await server.start()
        try:
            on = await fleet_path.cpu_us(server.url, 500)
            off = await fleet_path.cpu_us(None, 500)
            client = redis.Redis(port=server.port, decode_responses=True)
            tally: Tally = client.hgetall(Keys("fleet-path").tally)  # type: ignore[assignment]
            client.close()
            return on, off, tally
        finally:
            await server.stop()

    on, off, tally = asyncio.run(run())
    assert on > off > 0
    row = {name.rpartition(SEP)[2]: int(value) for name, value in tally.items()}
    assert row["failures"] == 500  # none dropped on the way
    assert row["retried_unchanged"] == 499  # each open settled the one before it, once
