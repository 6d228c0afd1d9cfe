"""Bridge sessions belong to their caller (docs/mcp.md#sessions-belong-to-their-caller).

Caller A (an API key) opens a session with the official SDK client; a keyless client and
caller B, holding A's session id, get the same 404 as for an unknown id on POST, GET and
DELETE, and A's session goes on. Anonymous clients are told apart by their address (the TCP
peer, 127.0.0.1 vs 127.0.0.2, or the client a trusted proxy names in `X-Forwarded-For`), and
one caller can hold at most its share (`max_sessions_per_caller` for a named caller,
`max_sessions_per_address` for an address, by default half the route): the next `initialize`
gets 429 while other callers still get theirs. The workers case is in test_mcp_bridge_workers.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.mcp.bridge_holders import Holder, holder_of
from gateway.resolve.callers import ANONYMOUS, Caller
from tests.support.gateway import RunningGateway, StartGateway, write_config
from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS

SDK_STDIO = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
# Starts in a tenth of the SDK server's time; answers each call with the `_reply` it carries.
LIGHT = [sys.executable, str(MCP_SERVERS / "bad_server.py")]
ACCEPT = "application/json, text/event-stream"
KEY_A, KEY_B = "key-of-caller-a-0001", "key-of-caller-b-0002"
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def digest(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def config(command: list[str] = LIGHT, **route: Any) -> dict[str, Any]:
    return {
        "admin": None,
        "callers": {
            "source": "api_key",
            "keys": [{"name": "a", "key": digest(KEY_A)}, {"name": "b", "key": digest(KEY_B)}],
        },
        "routes": [{"name": "tools", "type": "mcp", "command": command, **route}],
    }


def add(n: int) -> dict[str, Any]:
    """A call `LIGHT` answers with `{"result": n + 1}`."""
    reply = {"result": {"content": [], "structuredContent": {"result": n + 1}}}
    params = {"name": "add", "arguments": {"a": n, "b": 1}, "_reply": reply}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


@pytest.fixture
async def peers() -> AsyncIterator[dict[str, aiohttp.ClientSession]]:
    """HTTP clients bound to 127.0.0.1 and 127.0.0.2: two anonymous clients' addresses."""
    sessions = {
        source: aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0)))
        for source in ("127.0.0.1", "127.0.0.2")
    }
    yield sessions
    for session in sessions.values():
        await session.close()


async def send(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    session_id: str | None,
    message: Any = None,
    **headers: str,
) -> tuple[int, bytes, aiohttp.ClientResponse]:
    sent = {"Accept": ACCEPT if method != "GET" else "text/event-stream", **headers}
    if session_id is not None:
        sent["Mcp-Session-Id"] = session_id
    data = None
    if message is not None:
        sent["Content-Type"] = "application/json"
        data = json.dumps(message)
    async with http.request(method, url, data=data, headers=sent) as response:
        return response.status, await response.read(), response


async def open_session(
    http: aiohttp.ClientSession, url: str, **headers: str
) -> tuple[int, str, bytes, aiohttp.ClientResponse]:
    status, body, response = await send(http, url, "POST", None, INIT, **headers)
    session_id = response.headers.get("Mcp-Session-Id", "")
    if status == 200:
        status2, _, _ = await send(http, url, "POST", session_id, INITIALIZED, **headers)
        assert status2 == 202
    return status, session_id, body, response


async def refusals(
    http: aiohttp.ClientSession, url: str, session_id: str, **headers: str
) -> list[tuple[int, bytes]]:
    """POST (a tools/call, a notification), GET and DELETE with `session_id`: the answers."""
    answers = []
    for method, message in (("POST", add(7)), ("POST", INITIALIZED), ("GET", None)):
        status, body, _ = await send(http, url, method, session_id, message, **headers)
        answers.append((status, body))
    status, body, _ = await send(http, url, "DELETE", session_id, **headers)
    answers.append((status, body))
    return answers


async def test_another_caller_gets_the_unknown_session_404(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    gateway = await start_gateway(config(SDK_STDIO))
    url = gateway.url + "/mcp"
    seen: list[str] = []

    async def remember(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            seen.append(response.headers["mcp-session-id"])

    http = peers["127.0.0.1"]
    async with (
        httpx2.AsyncClient(
            headers={"X-Api-Key": KEY_A},
            event_hooks={"response": [remember]},
            timeout=httpx2.Timeout(30, read=300),  # the SDK's own client's timeouts
        ) as a_http,
        Client(streamable_http_client(url, http_client=a_http), mode="legacy") as a,
    ):
        assert (await a.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        stolen = seen[-1]
        unknown = stolen[:-4] + ("0000" if not stolen.endswith("0000") else "1111")
        expected = await refusals(http, url, unknown, **{"X-Api-Key": KEY_A})
        assert [status for status, _ in expected] == [404, 404, 404, 404]
        # The same peer without a key, caller B, and an invalid key: the unknown id's answers.
        for headers in ({}, {"X-Api-Key": KEY_B}, {"X-Api-Key": "not-a-key"}):
            assert await refusals(http, url, stolen, **headers) == expected, headers
        # A's session is whole: its calls still work, and the SDK's DELETE at exit ends it.
        after = await a.call_tool("add", {"a": 2, "b": 40})
        assert after.structured_content == {"result": 42}
    status, _, _ = await send(http, url, "POST", stolen, add(8), **{"X-Api-Key": KEY_A})
    assert status == 404, "the SDK client's DELETE ended the session"


async def test_the_refusal_is_the_unknown_ids_in_status_body_and_headers(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    gateway = await start_gateway(config())
    url = gateway.url + "/mcp"
    http = peers["127.0.0.1"]
    status, session_id, _, _ = await open_session(http, url, **{"X-Api-Key": KEY_A})
    assert status == 200
    unknown = session_id[:9] + "f" * (len(session_id) - 9)

    def shape(response: aiohttp.ClientResponse) -> dict[str, str]:
        ignored = {"date", "x-request-id"}
        return {k.lower(): v for k, v in response.headers.items() if k.lower() not in ignored}

    for method, message in (("POST", add(3)), ("GET", None), ("DELETE", None)):
        known = await send(http, url, method, session_id, message, **{"X-Api-Key": KEY_B})
        other = await send(http, url, method, unknown, message, **{"X-Api-Key": KEY_B})
        assert (known[0], known[1]) == (other[0], other[1]) == (404, known[1])
        assert shape(known[2]) == shape(other[2])
        assert json.loads(known[1])["error"]["code"] == -32001


async def test_a_foreign_request_costs_what_an_unknown_id_costs_and_touches_nothing(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    """Timing class: both answers are made before any child is written to. Interleaved, the
    medians agree within noise; and the session ends idle although a stranger keeps using its
    id, so the foreign requests never reached it (not even to refresh its idle clock)."""
    gateway = await start_gateway(config(session_idle_s=1.5))
    url = gateway.url + "/mcp"
    owner, stranger = peers["127.0.0.1"], peers["127.0.0.2"]
    status, session_id, _, _ = await open_session(owner, url)
    assert status == 200
    unknown = session_id[:9] + "e" * (len(session_id) - 9)
    timings: dict[str, list[float]] = {"foreign": [], "unknown": []}
    started = time.monotonic()
    for _ in range(40):
        for kind, sid in (("foreign", session_id), ("unknown", unknown)):
            begun = time.perf_counter()
            answered, _, _ = await send(stranger, url, "POST", sid, add(1))
            timings[kind].append(time.perf_counter() - begun)
            assert answered == 404
    foreign, unknown_median = (statistics.median(timings[k]) for k in ("foreign", "unknown"))
    assert foreign < unknown_median * 2 + 0.002, timings
    assert unknown_median < foreign * 2 + 0.002, timings
    # Keep knocking until the idle reaper has had its chance; the owner then finds it gone.
    while time.monotonic() - started < 3.5:
        assert (await send(stranger, url, "POST", session_id, add(2)))[0] == 404
        await asyncio.sleep(0.1)
    assert (await send(owner, url, "POST", session_id, add(3)))[0] == 404


async def test_anonymous_clients_are_told_apart_by_address(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    gateway = await start_gateway(config())
    url = gateway.url + "/mcp"
    first, second = peers["127.0.0.1"], peers["127.0.0.2"]
    status, session_id, _, _ = await open_session(first, url)
    assert status == 200
    assert [s for s, _ in await refusals(second, url, session_id)] == [404] * 4
    # A claim of the first address is only a header from an untrusted peer.
    claims = {"X-Forwarded-For": "127.0.0.1", "X-Mendpoint-Peer": "127.0.0.1"}
    assert [s for s, _ in await refusals(second, url, session_id, **claims)] == [404] * 4
    # A named caller from the same address is someone else too.
    with_key = await refusals(first, url, session_id, **{"X-Api-Key": KEY_A})
    assert [s for s, _ in with_key] == [404] * 4
    status, body, _ = await send(first, url, "POST", session_id, add(4))
    assert status == 200
    assert json.loads(body)["result"]["structuredContent"] == {"result": 5}


async def test_behind_a_trusted_proxy_the_forwarded_client_holds_the_session(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    """From a trusted proxy (127.0.0.2) the client is the last X-Forwarded-For entry the proxy
    appended; what the client prepended itself counts for nothing."""
    gateway = await start_gateway({**config(), "trusted_proxies": ["127.0.0.2"]})
    url = gateway.url + "/mcp"
    proxy = peers["127.0.0.2"]
    alice = {"X-Forwarded-For": "198.51.100.7"}
    status, session_id, _, _ = await open_session(proxy, url, **alice)
    assert status == 200
    bob = {"X-Forwarded-For": "198.51.100.7, 198.51.100.8"}  # bob prepends alice's address
    assert [s for s, _ in await refusals(proxy, url, session_id, **bob)] == [404] * 4
    assert [s for s, _ in await refusals(proxy, url, session_id)] == [404] * 4  # the proxy
    direct = peers["127.0.0.1"]  # not a trusted proxy: its X-Forwarded-For is its own word
    assert [s for s, _ in await refusals(direct, url, session_id, **alice)] == [404] * 4
    again = {"X-Forwarded-For": "203.0.113.1, 198.51.100.7"}  # alice, her own claim first
    status, body, _ = await send(proxy, url, "POST", session_id, add(5), **again)
    assert status == 200, body


def refusal(body: bytes) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(body)["error"]
    return error


async def test_one_caller_cannot_take_every_session(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    gateway = await start_gateway(config(max_sessions=4, max_sessions_per_address=2))
    url = gateway.url + "/mcp"
    greedy, other = peers["127.0.0.1"], peers["127.0.0.2"]
    mine = [(await open_session(greedy, url))[1] for _ in range(2)]
    status, _, body, response = await open_session(greedy, url)
    assert status == 429
    error = refusal(body)
    assert error["code"] == -32000
    assert "max_sessions_per_address: 2" in error["message"]
    assert error["data"] == {"max_sessions_per_address": 2}
    # No session used yet: the first ends idle within session_idle_s (300 s by default).
    assert 1 <= int(response.headers["Retry-After"]) <= 300
    # Everyone else still gets a session: another address, and a named caller on the same one.
    assert (await open_session(other, url))[0] == 200
    assert (await open_session(greedy, url, **{"X-Api-Key": KEY_A}))[0] == 200
    # The route's own bound is still there, and says so differently: 503 for everyone.
    assert (await open_session(other, url, **{"X-Api-Key": KEY_B}))[0] == 503
    # Ending one of its own sessions gives the greedy client its share back.
    assert (await send(greedy, url, "DELETE", mine[0]))[0] == 200
    assert (await open_session(greedy, url))[0] == 200


async def test_retry_after_is_when_the_first_own_session_goes_idle(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    gateway = await start_gateway(config(max_sessions_per_address=1, session_idle_s=3))
    url = gateway.url + "/mcp"
    http = peers["127.0.0.1"]
    assert (await open_session(http, url))[0] == 200
    status, _, _, response = await open_session(http, url)
    assert status == 429
    wait = int(response.headers["Retry-After"])
    assert 1 <= wait <= 3
    await asyncio.sleep(wait + 0.5)
    assert (await open_session(http, url))[0] == 200


async def test_concurrent_initializes_do_not_pass_the_per_caller_bound(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    gateway = await start_gateway(config(max_sessions_per_address=2))
    url = gateway.url + "/mcp"
    http = peers["127.0.0.1"]
    answers = await asyncio.gather(*(send(http, url, "POST", None, INIT) for _ in range(6)))
    assert sorted(status for status, _, _ in answers) == [200, 200, 429, 429, 429, 429]


async def test_by_default_an_address_gets_half_the_route_and_a_named_caller_four(
    start_gateway: StartGateway, peers: dict[str, aiohttp.ClientSession]
) -> None:
    """Many agents behind one address (a NAT, an egress proxy) cannot be told from one
    client: together they get half the route, and leave the rest at least half; a named
    caller's default stays 4 (docs/mcp.md#sessions-belong-to-their-caller)."""
    gateway = await start_gateway(config(max_sessions=12))
    url = gateway.url + "/mcp"
    nat = peers["127.0.0.1"]
    statuses = [(await open_session(nat, url))[0] for _ in range(7)]
    assert statuses == [200] * 6 + [429]
    named = [(await open_session(nat, url, **{"X-Api-Key": KEY_A}))[0] for _ in range(5)]
    assert named == [200] * 4 + [429]


async def test_the_sdk_client_past_its_share_gets_the_message(
    start_gateway: StartGateway,
) -> None:
    gateway: RunningGateway = await start_gateway(config(SDK_STDIO, max_sessions_per_address=1))
    url = gateway.url + "/mcp"
    async with Client(url, mode="legacy") as first:
        assert (await first.call_tool("add", {"a": 1, "b": 1})).structured_content
        with pytest.raises(BaseExceptionGroup) as refused:
            async with Client(url, mode="legacy") as second:
                await second.list_tools()
        errors = [e for e in leaves(refused.value) if isinstance(e, MCPError)]
        assert [e.error.code for e in errors] == [-32000]
        assert "max_sessions_per_address: 1" in errors[0].error.message
        assert errors[0].error.data == {"max_sessions_per_address": 1}


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups: the SDK raises from task groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


@pytest.mark.parametrize(
    ("caller", "address", "holder"),
    [
        (Caller("a", frozenset()), "127.0.0.1", Holder("caller", "a")),
        (ANONYMOUS, "203.0.113.9", Holder("address", "203.0.113.9")),
        (ANONYMOUS, "::ffff:203.0.113.9", Holder("address", "203.0.113.9")),
        (ANONYMOUS, "2001:db8:1:2:aaaa::1", Holder("address", "2001:db8:1:2::/64")),
        (ANONYMOUS, "2001:db8:1:2:bbbb::9", Holder("address", "2001:db8:1:2::/64")),
        (ANONYMOUS, "2001:db8:1:3::1", Holder("address", "2001:db8:1:3::/64")),
        (ANONYMOUS, None, Holder("address", "")),
    ],
    ids=["named", "ipv4", "mapped", "ipv6", "ipv6-same-64", "ipv6-other-64", "no-address"],
)
def test_holders(caller: Caller, address: str | None, holder: Holder) -> None:
    assert holder_of(caller, address) == holder


def test_a_caller_named_like_an_address_is_not_that_address() -> None:
    assert holder_of(Caller("203.0.113.9", frozenset()), None) != holder_of(
        ANONYMOUS, "203.0.113.9"
    )


@pytest.mark.parametrize(
    ("route", "phrase"),
    [
        ("max_sessions_per_caller: 20", "max_sessions_per_caller (20) is above max_sessions (16)"),
        ("max_sessions: 2\n    max_sessions_per_caller: 3", "(3) is above max_sessions (2)"),
        ("max_sessions_per_caller: 0", "greater than or equal to 1"),
        ("max_sessions_per_address: 17", "max_sessions_per_address (17) is above max_sessions"),
        ("max_sessions_per_address: 0", "greater than or equal to 1"),
    ],
    ids=["above-default-route-bound", "above-route-bound", "zero", "address-above", "address-0"],
)
def test_the_per_caller_bound_is_validated_with_file_and_line(
    tmp_path: Any, route: str, phrase: str
) -> None:
    text = f"routes:\n  - name: tools\n    type: mcp\n    command: [srv]\n    {route}\n"
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(str(path))
    assert f"{path}:" in str(refused.value) and phrase in str(refused.value), refused.value


def test_a_smaller_route_bound_lowers_the_default(tmp_path: Any) -> None:
    path = write_config(tmp_path, config(max_sessions=2))
    route = load_config(str(path)).config.routes[0]
    assert route.max_sessions_per_caller == 4 and route.sessions_for("caller") == 2
    assert route.sessions_for("address") == 1  # half the route's, at least one
    wider = load_config(str(write_config(tmp_path, config(max_sessions=5)))).config.routes[0]
    assert wider.sessions_for("address") == 3  # half, rounded up
