"""An MCP route (not the bridge) across replicas: two gateway processes behind HAProxy
round-robin in front of one MCP server, sharing a real redis-server
(docs/mcp.md#across-replicas). The server holds the session; what the gateway keeps per
route, the tools' annotations from `tools/list`, is told to every replica, so a session
whose requests alternate between replicas is answered as by one gateway, in both protocol
revisions."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from mcp import Client

from gateway.feedback.store import Keys
from tests.support.fleet import GatewayProcess, RedisServer, RoundRobin, fleet_key, sample
from tests.support.mcp import INIT, INITIALIZED, call
from tests.support.paths import MCP_SERVERS
from tests.support.ports import free_port
from tests.support.upstreams import wait_listening
from tests.support.waits import patience

PREFIX = "mcp-routes-test"
EVENTS = Keys(PREFIX).events

pytestmark = [pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="module")]

ACCEPT = "application/json, text/event-stream"


@dataclass
class McpFleet:
    replicas: list[GatewayProcess]
    front: RoundRobin


def replica_config(upstream: str, redis: str, key_file: str) -> dict[str, Any]:
    return {
        "routes": [
            {"name": "tools", "prefix": "/", "type": "mcp", "upstream": upstream},
            # The same server under a name no other test lists tools of.
            {
                "name": "fresh",
                "prefix": "/fresh",
                "strip_prefix": True,
                "type": "mcp",
                "upstream": upstream,
            },
        ],
        "fleet": {"redis": redis, "key_prefix": PREFIX, "key_file": key_file},
        "log": {"access": False},
        "shutdown": {"drain_delay_s": 0, "grace_s": 3},
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mcp_fleet(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[McpFleet]:
    directory = tmp_path_factory.mktemp("mcp-fleet")
    redis = RedisServer(free_port(), directory)
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        str(MCP_SERVERS / "sdk_server.py"),
        "http",
        str(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    replicas = [
        GatewayProcess(name, free_port(), free_port(), directory / name) for name in ("a", "b")
    ]
    front = RoundRobin(free_port(), [r.port for r in replicas], directory)
    try:
        await redis.start()
        await wait_listening(port, server)
        upstream = f"http://127.0.0.1:{port}"
        config = replica_config(upstream, redis.url, fleet_key(directory))
        await asyncio.gather(*(r.start(config) for r in replicas))
        await front.start()
        await until_subscribed(replicas, redis)
        yield McpFleet(replicas, front)
    finally:
        await front.stop()
        for replica in replicas:
            await replica.stop()
        server.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait(), 10)
        await redis.stop()


async def until_subscribed(
    replicas: list[GatewayProcess], redis: RedisServer, timeout_s: float = 30
) -> None:
    """Up is not yet listening: what one replica publishes before another has subscribed
    to the events channel is not heard there (a module's first test met that under xdist)."""
    deadline = time.monotonic() + patience(timeout_s)
    while True:
        texts = [await r.metrics() for r in replicas]
        up = all(sample(t, "mendpoint_fleet_store_up") == 1 for t in texts)
        if up and await redis.subscribers(EVENTS) >= len(replicas):
            return
        assert time.monotonic() < deadline, "the replicas never reached the store"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_a_session_through_the_round_robin_front_is_answered_as_by_one_gateway(
    mcp_fleet: McpFleet, mode: str
) -> None:
    """The official client, each request balanced anew: calls succeed, a tool error is
    upgraded whichever replica answers it, and both replicas served the session."""
    before = [await r.metrics() for r in mcp_fleet.replicas]
    async with Client(mcp_fleet.front.url + "/mcp", mode=mode) as client:
        tools = await client.list_tools()
        assert all("never invent recovery skills" in (t.description or "") for t in tools.tools)
        for n in range(4):
            ok = await client.call_tool("add", {"a": n, "b": 40})
            assert ok.structured_content == {"result": n + 40}
            failed = await client.call_tool("read_note", {"name": "nope"})
            assert failed.is_error is True
            assert failed.meta is not None
            assert failed.meta["mendpoint/failure"]["error"]["code"] == "FILE_NOT_FOUND"
            # A read-only tool's transient failure is retryable, whichever replica saw the
            # listing (docs/rules.md#tool-annotations).
            report = await client.call_tool("read_report", {"day": "monday"})
            assert report.meta is not None
            assert report.meta["mendpoint/failure"]["error"]["retryable"] is True
    after = [await r.metrics() for r in mcp_fleet.replicas]
    for old, new in zip(before, after, strict=True):
        served = sample(new, "mendpoint_requests_total", route="tools") - sample(
            old, "mendpoint_requests_total", route="tools"
        )
        assert served >= 4, "HAProxy sent each replica a share of the session's requests"


async def post(
    http: aiohttp.ClientSession, url: str, message: Any, session_id: str | None
) -> tuple[Any, str]:
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    if session_id is not None:
        headers |= {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    async with http.post(url, data=json.dumps(message), headers=headers) as answer:
        assert answer.status in (200, 202), await answer.text()
        text = await answer.text()
        sid = answer.headers.get("Mcp-Session-Id", session_id or "")
        if answer.content_type == "text/event-stream":
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            return (json.loads(data[-1]) if data and data[-1] else None), sid
        return (json.loads(text) if text else None), sid


def retryable(answer: Any) -> bool:
    failure = json.loads(answer["result"]["content"][-1]["text"])["mendpoint_failure"]
    return bool(failure["error"]["retryable"])


async def test_tool_annotations_listed_through_one_replica_hold_on_the_other(
    mcp_fleet: McpFleet,
) -> None:
    """tools/list through A only; the calls through B. Without the listing B would take
    read_report for a tool never listed, and its 503 for not safe to repeat."""
    a = mcp_fleet.replicas[0].base + "/fresh/mcp"
    b = mcp_fleet.replicas[1].base + "/fresh/mcp"
    async with aiohttp.ClientSession() as http:
        _, session_id = await post(http, a, INIT, None)
        assert session_id
        await post(http, a, INITIALIZED, session_id)
        before, _ = await post(http, b, call(1, "read_report", {"day": "monday"}), session_id)
        assert retryable(before) is False, "a tool never listed is not replay-safe"
        listing, _ = await post(
            http, a, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session_id
        )
        assert "read_report" in {tool["name"] for tool in listing["result"]["tools"]}
        deadline = time.monotonic() + patience(10)
        n = 3
        while True:
            answer, _ = await post(http, b, call(n, "read_report", {"day": "monday"}), session_id)
            if retryable(answer):
                break
            assert time.monotonic() < deadline, "B never learned what A's listing said"
            n += 1
            await asyncio.sleep(0.05)
        unsafe, _ = await post(http, b, call(n + 1, "send_report", {"day": "monday"}), session_id)
        assert retryable(unsafe) is False, "a tool with no annotations stays not retryable"
