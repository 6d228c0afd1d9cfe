"""Bridge routes under `serve --workers N`: every session works whichever worker a connection
reaches (docs/mcp.md, "The bridge"). The kernel spreads connections over the workers; a
session's child lives in the worker that opened it, and the others relay to it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
import yaml
from aiohttp import web
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.config.trust import from_sibling
from gateway.serve import workers
from tests.support.gateway import supervised
from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS, REPO
from tests.support.ports import free_port

pytestmark = pytest.mark.skipif(not workers.supported(), reason="--workers needs Linux")

SDK_STDIO = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
WORKERS = 3
ACCEPT = "application/json, text/event-stream"


StartWorkers = Callable[..., Awaitable[str]]


@pytest.fixture
async def start_workers(tmp_path: Path) -> AsyncIterator[StartWorkers]:
    """`serve --workers 3` as a process, its bridge running `command`; keyword arguments are
    more top-level config."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(command: list[str] = SDK_STDIO, **more: Any) -> str:
            return await stack.enter_async_context(serve(tmp_path, command, more))

        yield start


@pytest.fixture
async def gateway(start_workers: StartWorkers) -> str:
    return await start_workers()


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, command: list[str], more: dict[str, Any]) -> AsyncIterator[str]:
    port, admin = free_port(), free_port()
    config = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "workers": WORKERS,
        "routes": [{"name": "tools", "type": "mcp", "command": command}],
        "log": {"access": False},
        "shutdown": {"drain_delay_s": 0.2, "grace_s": 5},
        **more,
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    environ = {**os.environ, "PYTHONPATH": str(REPO)}
    async with supervised(path, f"127.0.0.1:{admin}", None, environ, ready_s=60, workers=None):
        yield f"http://127.0.0.1:{port}"


async def post(
    url: str,
    message: dict[str, Any],
    session_id: str | None,
    source: str = "127.0.0.1",
    **more: str,
) -> tuple[int, Any, str]:
    """One request on a connection of its own, so the kernel may hand it to any worker."""
    headers = {"Accept": ACCEPT, "Content-Type": "application/json", **more}
    if session_id:
        headers["Mcp-Session-Id"] = session_id
    connector = aiohttp.TCPConnector(force_close=True, local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.post(url, data=json.dumps(message), headers=headers) as answer,
    ):
        text = await answer.text()
        sid = answer.headers.get("Mcp-Session-Id", "")
        if answer.content_type == "text/event-stream":
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            return answer.status, json.loads(data[-1]), sid
        return answer.status, json.loads(text) if text else None, sid


async def test_every_request_of_a_session_reaches_its_child(gateway: str) -> None:
    url = gateway + "/mcp"

    status, _, session_id = await post(url, INIT, None)
    assert status == 200 and session_id
    notified = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await post(url, notified, session_id))[0] == 202
    # Twelve calls, each on a new connection: with three workers, most reach one that does not
    # hold the session (all twelve landing on the owner has odds of 1 in 531441).
    for n in range(1, 13):
        call = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": n, "b": 1}},
        }
        status, answer, _ = await post(url, call, session_id)
        assert status == 200, answer
        assert answer["result"]["structuredContent"] == {"result": n + 1}


async def test_sdk_client_sessions_all_work(gateway: str) -> None:
    """Eight agents, each from an address of its own (one address may hold only its share of
    the route's sessions, docs/mcp.md#sessions-belong-to-their-caller)."""

    async def one(n: int) -> None:
        transport = httpx2.AsyncHTTPTransport(local_address=f"127.0.0.{10 + n}")
        async with (
            # The SDK's own client's timeouts: eight servers starting at once take a while.
            httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(gateway + "/mcp", http_client=http)) as client,
        ):
            ok = await client.call_tool("add", {"a": n, "b": 1})
            assert ok.structured_content == {"result": n + 1}
            failed = await client.call_tool("read_note", {"name": "nope"})
            assert failed.is_error is True
            assert failed.meta is not None and "mendpoint/failure" in failed.meta
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} >= {"add", "read_note"}

    await asyncio.gather(*(one(n) for n in range(8)))


LIGHT = [sys.executable, str(MCP_SERVERS / "bad_server.py")]  # answers with the `_reply` sent
KEY_A, KEY_B = "key-of-caller-a-0001", "key-of-caller-b-0002"


def keyed(name: str, key: str) -> dict[str, str]:
    return {"name": name, "key": "sha256:" + hashlib.sha256(key.encode()).hexdigest()}


async def send(
    url: str, method: str, session_id: str, source: str, n: int, **headers: str
) -> tuple[int, Any]:
    """One request on a connection of its own from `source`, so any worker may take it."""
    sent = {"Accept": ACCEPT, "Content-Type": "application/json", "Mcp-Session-Id": session_id}
    if method == "GET":
        sent["Accept"] = "text/event-stream"
    reply = {"result": {"content": [], "structuredContent": {"result": n + 1}}}
    call = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"_reply": reply}}
    connector = aiohttp.TCPConnector(force_close=True, local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.request(
            method,
            url,
            data=json.dumps(call) if method == "POST" else None,
            headers={**sent, **headers},
        ) as answer,
    ):
        body = await answer.read()
        return answer.status, json.loads(body) if body else None


async def opened(url: str, source: str, **headers: str) -> str:
    status, _, session_id = await post(url, INIT, None, source, **headers)
    assert status == 200 and session_id
    return session_id


async def test_sessions_belong_to_their_caller_on_every_worker(
    start_workers: StartWorkers,
) -> None:
    """The owner checks the holder of every request a sibling relays to it: with the caller's
    key, the relayed peer (anonymous clients) and the client a trusted proxy names. Twelve
    rounds on new connections: with three workers most of them are relayed."""
    gateway = await start_workers(
        LIGHT,
        callers={"keys": [keyed("a", KEY_A), keyed("b", KEY_B)]},
        trusted_proxies=["127.0.0.3"],
    )
    url = gateway + "/mcp"
    a = {"X-Api-Key": KEY_A}
    alice = {"X-Forwarded-For": "198.51.100.7"}
    sessions = {
        "caller a": (await opened(url, "127.0.0.1", **a), "127.0.0.1", a),
        "anonymous 127.0.0.1": (await opened(url, "127.0.0.1"), "127.0.0.1", {}),
        "alice behind the proxy": (await opened(url, "127.0.0.3", **alice), "127.0.0.3", alice),
    }
    strangers = {
        "caller a": [("127.0.0.1", {}), ("127.0.0.1", {"X-Api-Key": KEY_B})],
        "anonymous 127.0.0.1": [
            ("127.0.0.2", {}),
            ("127.0.0.2", {"X-Mendpoint-Peer": "127.0.0.1"}),  # a client's claim: ignored
            ("127.0.0.1", {"X-Api-Key": KEY_B}),
        ],
        "alice behind the proxy": [
            ("127.0.0.3", {"X-Forwarded-For": "198.51.100.8"}),
            ("127.0.0.3", {"X-Forwarded-For": "198.51.100.7, 198.51.100.8"}),
            ("127.0.0.1", alice),  # not through the proxy: its own claim
        ],
    }
    for n in range(1, 13):
        for name, (session_id, source, headers) in sessions.items():
            for method in ("POST", "GET", "DELETE"):
                for other, claims in strangers[name]:
                    answer = await send(url, method, session_id, other, n, **claims)
                    assert answer == (404, SESSION_NOT_FOUND), (name, method, other, claims)
            status, body = await send(url, "POST", session_id, source, n, **headers)
            assert status == 200, (name, body)
            assert body["result"]["structuredContent"] == {"result": n + 1}


SESSION_NOT_FOUND = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {"code": -32001, "message": "Session not found"},
}


LIGHT = [sys.executable, str(MCP_SERVERS / "bad_server.py")]


async def test_session_bounds_count_across_the_workers(start_workers: StartWorkers) -> None:
    """An address's share and the route's bound are the gateway's, not each worker's: eight
    `initialize`s from one address, each on a connection of its own (so the kernel spreads
    them over the three workers), get exactly its share; on main each worker counted its
    own, so up to three times the share were granted. Then the route's bound, for
    everyone."""
    route = {"name": "tools", "type": "mcp", "command": LIGHT, "max_sessions": 3}
    url = await start_workers(LIGHT, routes=[route | {"max_sessions_per_address": 2}]) + "/mcp"
    answers = [await post(url, INIT, None) for _ in range(8)]
    statuses = [status for status, _, _ in answers]
    assert sorted(statuses) == [200] * 2 + [429] * 6, statuses
    refused = next(answer for status, answer, _ in answers if status == 429)
    assert refused["error"]["data"] == {"max_sessions_per_address": 2}
    # The route's third session goes to another address; a fourth, to anyone, is a 503.
    assert (await post(url, INIT, None, source="127.0.0.2"))[0] == 200
    assert (await post(url, INIT, None, source="127.0.0.3"))[0] == 503
    # Ending one (through whichever worker) gives its place back, on every worker.
    ended = next(sid for status, _, sid in answers if status == 200)
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.delete(url, headers={"Mcp-Session-Id": ended}) as answer,
    ):
        assert answer.status == 200
    assert (await post(url, INIT, None, source="127.0.0.3"))[0] == 200


async def test_only_the_gateways_own_user_may_name_a_peer_on_a_unix_socket() -> None:
    """`from_sibling`: the relayed peer is believed from a Unix socket whose other end runs as
    the gateway's user; not from another user on that socket (abstract sockets have no file
    permissions), and never over TCP."""
    app = web.Application()

    async def verdict(request: web.Request) -> web.Response:
        return web.Response(text=str(from_sibling(request.transport)))

    app.router.add_get("/", verdict)
    runner = web.AppRunner(app)
    await runner.setup()
    name = f"\0mendpoint-test-{os.getpid()}"
    await web.UnixSite(runner, name).start()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    try:
        assert await over_unix(name) == "True"
        if os.geteuid() == 0:  # become another user in a child; only root can
            assert await over_unix(name, user=65534) == "False"
        port = runner.addresses[1][1]
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/") as r:
            assert await r.text() == "False"
    finally:
        await runner.cleanup()


async def over_unix(name: str, user: int | None = None) -> str:
    """GET / over the abstract socket `name`, from a child process running as `user`."""
    script = (
        "import os, socket, sys\n"
        "user = int(sys.argv[2])\n"
        "if user >= 0:\n"
        "    os.setgid(user); os.setuid(user)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect('\\0' + sys.argv[1])\n"
        "s.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')\n"
        "data = b''\n"
        "while chunk := s.recv(4096):\n"
        "    data += chunk\n"
        "sys.stdout.write(data.split(b'\\r\\n\\r\\n', 1)[1].decode())\n"
    )
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        name[1:],
        str(-1 if user is None else user),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(child.communicate(), 20)
    assert child.returncode == 0
    return out.decode()
