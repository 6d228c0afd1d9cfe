"""Two gateway processes behind HAProxy round-robin, sharing a real redis-server: the scripted
agents' follow-ups are counted exactly as one process counts them, /followups and /gaps
answer the same on either replica, and a store that stops answering slows and fails nothing
(docs/operations.md#fleet)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.cli import main
from tests.support.agents import EXPECTED, counts_by_code, orders_app, run_all
from tests.support.fleet import GatewayProcess, RedisServer, RoundRobin, fleet_key, sample
from tests.support.gateway import StartGateway, route_config
from tests.support.ports import free_port
from tests.support.waits import patience

# Two gateway processes and HAProxy start for each test: tens of seconds on a loaded machine.
pytestmark = pytest.mark.timeout(240)

WINDOW_S = 2.0
SETTLE_S = WINDOW_S + 1.8
"""Past every failure's window, and a sweep (every 0.5 s) and a store round after it."""


@dataclass
class Fleet:
    replicas: list[GatewayProcess]
    front: RoundRobin
    redis: RedisServer
    via: dict[str, set[int]] = field(default_factory=dict)
    """Per User-Agent, the upstream ports (one per replica) its requests came through."""

    async def tables(self) -> list[dict[str, Any]]:
        return [await r.admin_json("/followups") for r in self.replicas]

    async def metrics(self) -> list[str]:
        return [await r.metrics() for r in self.replicas]


def fleet_config(upstream: str, redis: str, key_file: str, **fleet: Any) -> dict[str, Any]:
    return route_config(upstream, name="orders") | {
        "followups": {"window_s": WINDOW_S},
        "fleet": {"redis": redis, "key_prefix": "fleet-test", "key_file": key_file} | fleet,
        "log": {"access": False},
        "shutdown": {"drain_delay_s": 0, "grace_s": 5},
    }


@pytest.fixture
async def start_fleet(
    tmp_path: Path, redis_server: RedisServer
) -> AsyncIterator[Callable[..., Awaitable[Fleet]]]:
    started: list[GatewayProcess | RoundRobin] = []  # stopped at the end, however far it got
    runners: list[web.AppRunner] = []

    async def start(**fleet: Any) -> Fleet:
        via: dict[str, set[int]] = {}

        def note(request: web.Request) -> None:
            sock = request.transport.get_extra_info("sockname") if request.transport else None
            if sock is not None:
                via.setdefault(request.headers.get("User-Agent", ""), set()).add(int(sock[1]))

        # One upstream app (one state) on one port per replica: the port says which sent it.
        runner = web.AppRunner(orders_app(note))
        await runner.setup()
        runners.append(runner)
        ports = [free_port(), free_port()]
        for port in ports:
            await web.TCPSite(runner, "127.0.0.1", port).start()
        replicas = [
            GatewayProcess(name, free_port(), free_port(), tmp_path / name) for name in ("a", "b")
        ]
        started.extend(replicas)
        await asyncio.gather(
            *(
                replica.start(
                    fleet_config(
                        f"http://127.0.0.1:{port}", redis_server.url, fleet_key(tmp_path), **fleet
                    )
                )
                for replica, port in zip(replicas, ports, strict=True)
            )
        )
        front = RoundRobin(free_port(), [r.port for r in replicas], tmp_path)
        started.insert(0, front)
        await front.start()
        result = Fleet(replicas, front, redis_server, via)
        await until_up(result)
        return result

    yield start
    for process in started:
        await process.stop()
    for runner in runners:
        await runner.cleanup()


async def until_up(fleet: Fleet, up: float = 1.0, timeout_s: float = 20) -> None:
    """Until every replica's mendpoint_fleet_store_up reads `up`."""
    deadline = time.monotonic() + patience(timeout_s)
    while True:
        texts = await fleet.metrics()
        if all(sample(t, "mendpoint_fleet_store_up") == up for t in texts):
            return
        assert time.monotonic() < deadline, f"mendpoint_fleet_store_up never read {up}"
        await asyncio.sleep(0.1)


def prometheus_counts(texts: list[str]) -> dict[str, dict[str, int]]:
    """mendpoint_followups_total summed over the replicas, as Prometheus sums them."""
    counts: dict[str, dict[str, int]] = {}
    for code, row in EXPECTED.items():
        counts[code] = {
            outcome: int(
                sum(
                    sample(t, "mendpoint_followups_total", code=code, outcome=outcome)
                    for t in texts
                )
            )
            for outcome in row
            if outcome != "failures"
        }
    return counts


def without_failures(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {code: {k: v for k, v in row.items() if k != "failures"} for code, row in counts.items()}


async def single_process_gaps(start_gateway: StartGateway, tmp_path: Path) -> list[dict[str, Any]]:
    """The /gaps of the same agents through one gateway without a store."""
    runner = web.AppRunner(orders_app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        config = route_config(f"http://127.0.0.1:{port}", name="orders")
        gateway = await start_gateway(
            config | {"followups": {"window_s": WINDOW_S}}, admin="127.0.0.1:0"
        )
        await run_all(gateway.url)
        assert gateway.server.admin_address is not None
        host, admin = gateway.server.admin_address
        async with gateway.session.get(f"http://{host}:{admin}/gaps?limit=50") as answer:
            body: dict[str, Any] = await answer.json()
        assert body["scope"] == "process"
        rows: list[dict[str, Any]] = body["signatures"]
        return rows
    finally:
        await runner.cleanup()


async def test_scripted_agents_through_two_replicas_count_as_one_process(
    start_fleet: Callable[..., Awaitable[Fleet]],
    start_gateway: StartGateway,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected_gaps = await single_process_gaps(start_gateway, tmp_path)
    assert expected_gaps, "the agents' failures make unmatched signatures"
    fleet = await start_fleet()
    await run_all(fleet.front.url)
    # The front spread the agents' requests over both replicas.
    assert len(set().union(*fleet.via.values())) == 2, fleet.via
    await asyncio.sleep(SETTLE_S)
    tables = await fleet.tables()
    for table in tables:
        assert table["scope"] == "fleet"
        assert table["window_s"] == WINDOW_S
        assert counts_by_code(table["codes"]) == EXPECTED
    assert tables[0]["codes"] == tables[1]["codes"]
    # Prometheus, summed over the replicas, counts each outcome once too.
    assert prometheus_counts(await fleet.metrics()) == without_failures(EXPECTED)
    gaps = [await r.admin_json("/gaps?limit=50") for r in fleet.replicas]
    assert gaps[0] == gaps[1]
    assert gaps[0]["scope"] == "fleet"

    def counted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in row.items() if k != "sample"} for row in rows]

    assert counted(gaps[0]["signatures"]) == counted(expected_gaps)
    # Each keeps a sample in the store (whichever replica's failure it was).
    assert all(row["sample"]["status"] == int(row["status"]) for row in gaps[0]["signatures"])
    # `mendpoint followups/gaps --admin` against either replica prints the same fleet.
    printed = []
    for replica in fleet.replicas:
        assert await asyncio.to_thread(main, ["followups", "--admin", replica.admin_url]) == 0
        assert await asyncio.to_thread(main, ["gaps", "--admin", replica.admin_url]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1]
    assert printed[0].count("fleet-wide") == 2
    assert "BAD_REQUEST" in printed[0]
    # One caller alone, so round-robin alternates: fails on one replica, retries unchanged on
    # the other, fixes the request on the first; both outcomes are counted fleet-wide.
    await alternating_agent(fleet.front.url)
    assert len(fleet.via["alternating"]) == 2
    bad = EXPECTED["BAD_REQUEST"]
    for replica in fleet.replicas:
        await until_counts(
            replica,
            failures=bad["failures"] + 2,
            retried_unchanged=bad["retried_unchanged"] + 1,
            recovered=bad["recovered"] + 1,
        )


async def alternating_agent(base_url: str) -> None:
    async with aiohttp.ClientSession(headers={"User-Agent": "alternating"}) as session:
        for qty in (-1, -1, 3):
            async with session.post(base_url + "/orders", json={"qty": qty}) as answer:
                await answer.read()


async def until_counts(replica: GatewayProcess, timeout_s: float = 10, **wanted: int) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while True:
        table = await replica.admin_json("/followups")
        row = counts_by_code(table["codes"])["BAD_REQUEST"]
        if all(row[k] == v for k, v in wanted.items()):
            return
        assert time.monotonic() < deadline, (row, wanted)
        await asyncio.sleep(0.1)


@dataclass
class Timed:
    statuses: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


async def timed_agents(base_url: str, rounds: int) -> Timed:
    """A steady stream of successes and failures, each request timed."""
    timed = Timed()
    async with aiohttp.ClientSession(headers={"User-Agent": "steady"}) as session:
        for index in range(rounds):
            payload = {"qty": index % 3 - 1}  # -1 (400), 0 (400), 1 (201)
            started = time.monotonic()
            async with session.post(base_url + "/orders", json=payload) as answer:
                await answer.read()
                timed.statuses.append(answer.status)
            timed.seconds.append(time.monotonic() - started)
    return timed


@pytest.mark.slow
async def test_a_store_that_stops_answering_slows_and_fails_nothing_and_counts_resume(
    start_fleet: Callable[..., Awaitable[Fleet]],
) -> None:
    # A blocked store call would take the whole timeout: 2 s, far above any request's time.
    fleet = await start_fleet(timeout_ms=2000)
    before = await timed_agents(fleet.front.url, 30)  # the scripted agents run once, last
    assert before.statuses == [400, 400, 201] * 10
    degraded = [sample(t, "mendpoint_fleet_store_degraded_total") for t in await fleet.metrics()]
    assert fleet.redis.process is not None
    fleet.redis.process.send_signal(signal.SIGSTOP)  # connections stay open; nothing answers
    try:
        during = await timed_agents(fleet.front.url, 30)
        await until_up(fleet, 0.0)
        after = await fleet.metrics()
        assert [sample(t, "mendpoint_fleet_store_degraded_total") for t in after] == [
            d + 1 for d in degraded
        ]
        for replica in fleet.replicas:  # /followups answers, from the process, saying so
            table = await replica.admin_json("/followups")
            assert table["scope"] == "process" and "unreachable" in table["store"]
    finally:
        fleet.redis.process.send_signal(signal.SIGCONT)
    assert during.statuses == [400, 400, 201] * 10
    assert max(during.seconds) < max(0.5, 3 * max(before.seconds)), during.seconds
    await until_up(fleet, 1.0)
    await asyncio.sleep(SETTLE_S)  # the replayed writes land, and their failures settle
    settled = [counts_by_code(t["codes"]) for t in await fleet.tables()]
    assert settled[0] == settled[1]
    # Counting resumes: one more run of the agents adds exactly one process's counts.
    await run_all(fleet.front.url)
    await asyncio.sleep(SETTLE_S)
    tables = await fleet.tables()
    for table in tables:
        assert table["scope"] == "fleet"
        now = counts_by_code(table["codes"])
        added = {
            code: {k: now[code][k] - settled[0].get(code, {}).get(k, 0) for k in row}
            for code, row in EXPECTED.items()
        }
        assert added == EXPECTED


@pytest.mark.slow
async def test_a_dead_store_is_per_process_tracking_until_it_is_back(
    start_fleet: Callable[..., Awaitable[Fleet]], redis_server: RedisServer
) -> None:
    fleet = await start_fleet()
    await redis_server.stop()  # killed: every connection refused at once
    async with aiohttp.ClientSession() as session:
        for _ in range(10):
            started = time.monotonic()
            async with session.post(fleet.front.url + "/orders", json={"qty": 2}) as answer:
                assert answer.status == 201
            assert time.monotonic() - started < 0.5
    await until_up(fleet, 0.0)
    for replica in fleet.replicas:
        assert (await replica.admin_json("/gaps"))["scope"] == "process"
    await redis_server.start()  # a new, empty store on the same address
    await until_up(fleet, 1.0)
    await run_all(fleet.front.url)
    await asyncio.sleep(SETTLE_S)
    for table in await fleet.tables():
        assert table["scope"] == "fleet"
        assert counts_by_code(table["codes"]) == EXPECTED
