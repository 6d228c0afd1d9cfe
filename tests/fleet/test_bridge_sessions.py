"""Bridge sessions across replicas: two gateway processes behind HAProxy round-robin, sharing
a real redis-server and a session key (docs/mcp.md#replicas). A session opened through one
replica is used, listened to and ended through the other; an id a client made up or changed
is a 404; the internal relay port serves signed requests only; an owner that stops or dies
is a 404 within a bound, never a hang."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.config.session_keys import SessionKeys, relay_fields
from gateway.mcp.bridge_replicas import RECORD_TTL_S
from tests.support.fleet import GatewayProcess, RedisServer, RoundRobin, sample
from tests.support.mcp import INIT, INITIALIZED, call
from tests.support.paths import MCP_SERVERS
from tests.support.ports import free_port
from tests.support.secrets import write_secret
from tests.support.waits import patience

pytestmark = [pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="module")]

SDK_STDIO = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
SECRET = "bridge-fleet-test-key-" + "0123456789abcdef" * 2
PREFIX = "bridge-test"
JSON = "application/json"
BOTH = "application/json, text/event-stream"


@dataclass
class BridgeFleet:
    replicas: list[GatewayProcess]
    relays: list[int]
    front: RoundRobin

    def url(self, index: int) -> str:
        return self.replicas[index].base + "/mcp"


def replica_config(redis: str, key_file: Path, relay: int) -> dict[str, Any]:
    return {
        "routes": [{"name": "tools", "type": "mcp", "command": SDK_STDIO}],
        "fleet": {
            "redis": redis,
            "key_prefix": PREFIX,
            "sessions": {"key_file": str(key_file), "listen": f"127.0.0.1:{relay}"},
        },
        "log": {"access": False},
        "shutdown": {"drain_delay_s": 0, "grace_s": 3},
        # The upgrade of a relayed call is what is tested, not the budget: on a loaded machine
        # 200 ms ran out once and the call fell open to the server's own answer, as designed.
        "enrich_budget_ms": 5000,
    }


def prepare(directory: Path) -> Path:
    """The fleet's folders and its session key file."""
    (directory / "redis").mkdir(parents=True, exist_ok=True)
    key_file = directory / "session.key"
    write_secret(key_file, SECRET + "\n")
    return key_file


@contextlib.asynccontextmanager
async def running_fleet(directory: Path) -> AsyncIterator[BridgeFleet]:
    """A redis-server, two replicas sharing it and a session key, HAProxy in front."""
    key_file = await asyncio.to_thread(prepare, directory)
    redis = RedisServer(free_port(), directory / "redis")
    replicas = [
        GatewayProcess(name, free_port(), free_port(), directory / name) for name in ("a", "b")
    ]
    relays = [free_port(), free_port()]
    front = RoundRobin(free_port(), [r.port for r in replicas], directory)
    try:
        await redis.start()
        await asyncio.gather(
            *(
                replica.start(replica_config(redis.url, key_file, relay))
                for replica, relay in zip(replicas, relays, strict=True)
            )
        )
        await front.start()
        await until_announced(replicas, redis)
        yield BridgeFleet(replicas, relays, front)
    finally:
        await front.stop()
        for replica in replicas:
            if replica.process is not None and replica.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    replica.process.send_signal(signal.SIGCONT)
            await replica.stop()
        await redis.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_fleet(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BridgeFleet]:
    """One fleet for the tests that leave it as they found it (starting one takes seconds)."""
    async with running_fleet(tmp_path_factory.mktemp("bridge-fleet")) as fleet:
        yield fleet


@pytest_asyncio.fixture(loop_scope="module")
async def own_fleet(tmp_path: Path) -> AsyncIterator[BridgeFleet]:
    async with running_fleet(tmp_path) as fleet:
        yield fleet


async def until_announced(
    replicas: list[GatewayProcess], redis: RedisServer, timeout_s: float = 30
) -> None:
    """Until both replicas' owner records are in the store and their store reads up."""
    deadline = time.monotonic() + patience(timeout_s)
    while True:
        records = await redis.command("KEYS", "{" + PREFIX + "}:relay:*")
        texts = [await r.metrics() for r in replicas]
        if records.strip() == b"*2" and all(
            sample(t, "mendpoint_fleet_store_up") == 1 for t in texts
        ):
            return
        assert time.monotonic() < deadline, f"replicas not announced: {records!r}"
        await asyncio.sleep(0.1)


async def post(
    http: aiohttp.ClientSession,
    url: str,
    message: Any,
    session_id: str | None,
    accept: str = JSON,
) -> tuple[int, Any, str]:
    headers = {"Accept": accept, "Content-Type": JSON}
    if session_id is not None:
        headers["Mcp-Session-Id"] = session_id
    async with http.post(url, data=json.dumps(message), headers=headers) as answer:
        text = await answer.text()
        body = json.loads(text) if text and answer.content_type == JSON else text
        return answer.status, body, answer.headers.get("Mcp-Session-Id", "")


async def open_session(http: aiohttp.ClientSession, url: str) -> str:
    status, _, session_id = await post(http, url, INIT, None)
    assert status == 200 and session_id
    assert (await post(http, url, INITIALIZED, session_id))[0] == 202
    return session_id


def not_found(status: int, body: Any) -> bool:
    return status == 404 and isinstance(body, dict) and body["error"]["code"] == -32001


async def test_a_session_opened_through_one_replica_is_used_and_deleted_through_the_other(
    shared_fleet: BridgeFleet,
) -> None:
    a, b = shared_fleet.url(0), shared_fleet.url(1)
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, a)
        for n in range(1, 5):
            status, body, named = await post(http, b, call(n, "add", {"a": n, "b": 10}), session_id)
            assert status == 200 and named == session_id, body
            assert body["result"]["structuredContent"] == {"result": n + 10}
        # The owner's upgrades apply to a call relayed from the other replica.
        status, body, _ = await post(http, b, call(7, "frobnicate", {}), session_id)
        assert status == 200 and body["result"]["isError"] is True
        assert any(
            "mendpoint_failure" in item.get("text", "") for item in body["result"]["content"]
        )
        # One child answers through either replica.
        pids_a = (await post(http, a, call(8, "pids", {}), session_id))[1]
        pids_b = (await post(http, b, call(9, "pids", {}), session_id))[1]
        server_pid = pids_a["result"]["structuredContent"]["server"]
        assert server_pid == pids_b["result"]["structuredContent"]["server"]

        # The GET stream, through B: a log line of a call answered as JSON arrives on it.
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
        async with http.get(b, headers=headers) as stream:
            assert stream.status == 200
            assert stream.content_type == "text/event-stream"
            status, body, _ = await post(
                http, a, call(10, "read_note_slowly", {"name": "todo"}), session_id
            )
            assert status == 200 and "result" in body
            event = await asyncio.wait_for(stream.content.readuntil(b"\n\n"), 20)
            assert b"looking for todo" in event and b"notifications/message" in event

        async with http.delete(b, headers={"Mcp-Session-Id": session_id}) as deleted:
            assert deleted.status == 200
        for url in (a, b):
            status, body, _ = await post(http, url, call(11, "add", {"a": 1, "b": 1}), session_id)
            assert not_found(status, body), (status, body)
    await until_gone(server_pid)


async def until_gone(pid: int, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"the session's child {pid} is still running"
        await asyncio.sleep(0.05)


async def test_the_sdk_client_holds_a_session_through_the_round_robin_front(
    shared_fleet: BridgeFleet,
) -> None:
    """The official client, each of its requests balanced anew by HAProxy: every call after
    the first reaches a replica by turns, half of them the one without the child."""
    before = [await r.metrics() for r in shared_fleet.replicas]
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        Client(streamable_http_client(shared_fleet.front.url + "/mcp", http_client=http)) as client,
    ):
        tools = await client.list_tools()
        assert "add" in {tool.name for tool in tools.tools}
        for n in range(6):
            result = await client.call_tool("add", {"a": n, "b": 1})
            assert result.structured_content == {"result": n + 1}
    after = [await r.metrics() for r in shared_fleet.replicas]
    for old, new in zip(before, after, strict=True):
        served = sample(new, "mendpoint_requests_total", route="tools") - sample(
            old, "mendpoint_requests_total", route="tools"
        )
        assert served >= 4, "HAProxy sent each replica a share of the session's requests"


def forgeries(session_id: str, other_replica: str) -> dict[str, str]:
    replica, worker, secret, mac = session_id.split("-")

    def flip(char: str) -> str:
        """Another hex digit than `char` (each field's own last one: a digit flipped by the
        other field's rule would be left as it was one time in sixteen)."""
        return "1" if char == "0" else "0"

    body = f"{replica}-{worker}-{secret}"
    wrong_key = SessionKeys.from_secrets(["another-fleet-entirely-" + "f" * 32])
    moved = f"{other_replica}-{worker}-{secret}"
    return {
        "mac changed": f"{body}-{mac[:-1]}{flip(mac[-1])}",
        "secret changed": f"{replica}-{worker}-{secret[:-1]}{flip(secret[-1])}-{mac}",
        "moved to the other replica": f"{moved}-{mac}",
        "signed with another key": f"{body}-{wrong_key.sign_id(body)}",
        "made up, other replica": f"{moved}-{wrong_key.sign_id(moved)}",
        "unsigned form": f"{worker}-{secret}",
        "no mac": body,
        "not hex": f"{replica}-{worker}-{'z' * 32}-{mac}",
    }


async def test_forged_and_tampered_ids_are_404_on_either_replica(
    shared_fleet: BridgeFleet,
) -> None:
    a, b = shared_fleet.url(0), shared_fleet.url(1)
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, a)
        other = (await open_session(http, b)).split("-")[0]
        assert other != session_id.split("-")[0], "each replica names itself"
        for what, forged in forgeries(session_id, other).items():
            assert forged != session_id, what
            for url in (a, b):
                status, body, _ = await post(http, url, call(1, "add", {"a": 1, "b": 2}), forged)
                assert not_found(status, body), (what, url, status, body)
        status, body, _ = await post(http, b, call(2, "add", {"a": 1, "b": 2}), session_id)
        assert status == 200 and body["result"]["structuredContent"] == {"result": 3}


async def test_the_relay_port_takes_signed_requests_only(shared_fleet: BridgeFleet) -> None:
    relay = f"http://127.0.0.1:{shared_fleet.relays[0]}"
    keys = SessionKeys.from_secrets([SECRET])
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, shared_fleet.url(0))
        message = json.dumps(call(1, "add", {"a": 2, "b": 2}))
        base = {"Accept": JSON, "Content-Type": JSON, "Mcp-Session-Id": session_id}
        base |= {"X-Mendpoint-Peer": "127.0.0.1", "X-Request-Id": "relay-test"}

        async def relayed(signature: str | None) -> tuple[int, str]:
            headers = dict(base)
            if signature is not None:
                headers["X-Mendpoint-Relay"] = signature
            async with http.post(relay + "/mcp", data=message, headers=headers) as answer:
                return answer.status, await answer.text()

        fields = relay_fields("POST", "/mcp", base)
        wrong = SessionKeys.from_secrets(["another-fleet-entirely-" + "f" * 32])
        refused = {
            "unsigned": None,
            "garbage": "12345.abcdef",
            "another key": wrong.sign_relay(fields, time.time()),
            "stale": keys.sign_relay(fields, time.time() - 120),
            "other request": keys.sign_relay(relay_fields("POST", "/other", base), time.time()),
        }
        for what, signature in refused.items():
            status, text = await relayed(signature)
            assert status == 403, (what, status, text)
        status, text = await relayed(keys.sign_relay(fields, time.time()))
        assert status == 200 and '"result":4' in text.replace(" ", ""), text


@pytest.mark.slow
async def test_an_owner_that_is_gone_is_a_404_within_a_bound(own_fleet: BridgeFleet) -> None:
    """Stopped (SIGSTOP: its ports still accept, nothing answers), then killed."""
    a, b = own_fleet.url(0), own_fleet.url(1)
    owner = own_fleet.replicas[0].process
    assert owner is not None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        for how, stop, bound in (
            # The record's last renewal runs out, and the waiting relay gives up at its next
            # look; killed, the connection is refused at once.
            ("stopped", signal.SIGSTOP, RECORD_TTL_S + 3),
            ("killed", signal.SIGKILL, 3.0),
        ):
            session_id = await open_session(http, a)
            assert (await post(http, b, call(1, "add", {"a": 1, "b": 1}), session_id))[0] == 200
            owner.send_signal(stop)
            began = time.monotonic()
            status, body, _ = await post(http, b, call(2, "add", {"a": 1, "b": 1}), session_id)
            took = time.monotonic() - began
            assert not_found(status, body), (how, status, body)
            assert took < bound, f"{how}: 404 after {took:.1f} s"
            began = time.monotonic()  # and the next request at once
            status, body, _ = await post(http, b, call(3, "add", {"a": 1, "b": 1}), session_id)
            assert not_found(status, body) and time.monotonic() - began < 2, how
            if stop == signal.SIGSTOP:
                owner.send_signal(signal.SIGCONT)
                await until_renewed(http, a, b)


async def until_renewed(http: aiohttp.ClientSession, a: str, b: str, timeout_s: float = 30) -> None:
    """Until a session opened on the resumed owner is reachable through the other again."""
    deadline = time.monotonic() + patience(timeout_s)
    while True:
        session_id = await open_session(http, a)
        status, _, _ = await post(http, b, call(4, "add", {"a": 1, "b": 1}), session_id)
        async with http.delete(a, headers={"Mcp-Session-Id": session_id}):
            pass
        if status == 200:
            return
        assert time.monotonic() < deadline, "the resumed owner's record never came back"
        await asyncio.sleep(0.2)
