"""The bridge: `type: mcp` routes with `command:` serve stdio servers over Streamable HTTP.

The official SDK client talks to an SDK-written server and to the npm filesystem server, each
a child of the gateway; raw HTTP checks the wire (byte-identical successes, session ids, status
codes) and that DELETE, idleness and shutdown leave no process of the session's group alive.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client
from pydantic import ValidationError

from gateway.config.loader import load_config
from gateway.config.route_model import RouteSpec
from gateway.serve.app import GatewayServer
from tests.support.gateway import StartGateway, write_config
from tests.support.mcp import INIT, INITIALIZED, RawSession, bridge_config, call
from tests.support.paths import MCP_SERVERS

SERVERS = MCP_SERVERS
SDK_SERVER = [sys.executable, str(SERVERS / "sdk_server.py"), "stdio"]
FILESYSTEM = SERVERS / "node_modules" / ".bin" / "mcp-server-filesystem"
ACCEPT_BOTH = "application/json, text/event-stream"


def filesystem(root: Path) -> list[str]:
    assert FILESYSTEM.exists(), f"{FILESYSTEM} is missing: run `make mcp-servers`"
    return [str(FILESYSTEM), str(root)]


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody has reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


async def wait_gone(*pids: int, within_s: float = 10) -> None:
    for _ in range(int(within_s / 0.05)):
        if not any(alive(pid) for pid in pids):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"still running: {[p for p in pids if alive(p)]}")


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def direct_lines(command: list[str], messages: list[dict[str, Any]]) -> dict[Any, bytes]:
    """Each response line the server writes on stdio, by id: what the bridge must not alter."""
    lines = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    done = subprocess.run(command, input=lines, capture_output=True, timeout=60, check=False)
    return {
        json.loads(line)["id"]: line
        for line in done.stdout.splitlines()
        if "id" in json.loads(line)
    }


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "auto"])
async def test_sdk_client_and_sdk_server_through_the_bridge(
    start_gateway: StartGateway, mode: str
) -> None:
    gateway = await start_gateway(bridge_config(SDK_SERVER))
    async with Client(gateway.url + "/mcp", mode=mode) as client:
        ok = await client.call_tool("add", {"a": 2, "b": 40})
        assert ok.is_error is not True
        assert ok.structured_content == {"result": 42}
        failed = await client.call_tool("read_note", {"name": "nope"})
        assert failed.is_error is True
        first = failed.content[0]
        assert first.type == "text" and "ENOENT" in first.text
        item = json.loads(failed.content[-1].text)["mendpoint_failure"]  # type: ignore[union-attr]
        assert item["error"]["code"] == "FILE_NOT_FOUND"
        assert failed.meta is not None
        assert failed.meta["mendpoint/failure"] == item
        assert failed.meta["io.modelcontextprotocol/toolFailure"]["class"] == "capability"
        tools = await client.list_tools()
        assert all("never invent recovery skills" in (t.description or "") for t in tools.tools)


@pytest.fixture
def fsroot(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.txt").write_text("hello from the bridge\n")
    return root


async def test_sdk_client_and_filesystem_server_through_the_bridge(
    start_gateway: StartGateway, fsroot: Path
) -> None:
    gateway = await start_gateway(bridge_config(filesystem(fsroot)))
    async with Client(gateway.url + "/mcp", mode="legacy") as client:
        failed = await client.call_tool("read_text_file", {"path": str(fsroot / "todo.txt")})
        assert failed.is_error is True
        first = failed.content[0]
        assert first.type == "text" and first.text.startswith("ENOENT")
        item = json.loads(failed.content[-1].text)["mendpoint_failure"]  # type: ignore[union-attr]
        assert item["error"]["code"] == "FILE_NOT_FOUND"
        outside = await client.call_tool("read_text_file", {"path": "/etc/hostname"})
        code = json.loads(outside.content[-1].text)["mendpoint_failure"]["error"]["code"]  # type: ignore[union-attr]
        assert code == "PATH_OUTSIDE_ALLOWED"
        ok = await client.call_tool("read_text_file", {"path": str(fsroot / "a.txt")})
        assert ok.is_error is not True
        assert [c.text for c in ok.content] == ["hello from the bridge\n"]  # type: ignore[union-attr]


@pytest.mark.parametrize("accept", ["application/json", ACCEPT_BOTH], ids=["json", "sse"])
async def test_success_is_byte_identical_to_the_servers_line(
    start_gateway: StartGateway, http: aiohttp.ClientSession, fsroot: Path, accept: str
) -> None:
    command = filesystem(fsroot)
    success = call(1, "read_text_file", {"path": str(fsroot / "a.txt")})
    failing = call(2, "read_text_file", {"path": str(fsroot / "todo.txt")})
    direct = direct_lines(command, [INIT, INITIALIZED, success, failing])
    gateway = await start_gateway(bridge_config(command))
    session = RawSession(http, gateway.url + "/mcp")
    started = await session.start()
    assert started.headers["Content-Type"] == "application/json"
    assert json.loads(await started.read())["result"]["serverInfo"]["name"]
    ok = await session.post(success, accept)
    body = await ok.read()
    # A single answer with nothing before it is one JSON body, even for a client that also
    # accepts an event stream.
    assert ok.headers["Content-Type"] == "application/json"
    assert body == direct[1]
    bad = await session.post(failing, accept)
    upgraded = json.loads(await bad.read())
    original = json.loads(direct[2])["result"]["content"]
    assert upgraded["result"]["content"][: len(original)] == original
    assert "mendpoint_failure" in upgraded["result"]["content"][-1]["text"]


async def test_delete_ends_the_session_and_kills_the_process_group(
    start_gateway: StartGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await start_gateway(bridge_config(SDK_SERVER))
    session = RawSession(http, gateway.url + "/mcp")
    await session.start()
    server, helper = await session.pids()
    assert alive(server) and alive(helper)
    deleted = await session.delete()
    assert deleted.status == 200
    await wait_gone(server, helper, within_s=1)  # gone by the time DELETE was answered
    after = await session.post(call(3, "add", {"a": 1, "b": 1}))
    assert after.status == 404
    assert json.loads(await after.read())["error"]["code"] == -32001


async def test_idle_session_is_reaped(
    start_gateway: StartGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await start_gateway(bridge_config(SDK_SERVER, session_idle_s=0.5))
    session = RawSession(http, gateway.url + "/mcp")
    await session.start()
    server, helper = await session.pids()
    await asyncio.sleep(0.2)
    assert alive(server), "reaped before it was idle"
    await wait_gone(server, helper)
    assert (await session.post(call(3, "add", {"a": 1, "b": 1}))).status == 404


async def test_session_bounds_and_refusals(
    start_gateway: StartGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await start_gateway(bridge_config(SDK_SERVER, max_sessions=1))
    url = gateway.url + "/mcp"
    first = RawSession(http, url)
    await first.start()
    # Another client (another address): the route's bound, not the first client's own.
    elsewhere = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=elsewhere) as other:
        full = await RawSession(other, url).post(INIT)
    assert full.status == 503
    assert full.headers["Retry-After"] == "1"
    no_session = await RawSession(http, url).post(call(1, "add", {"a": 1, "b": 1}))
    assert no_session.status == 400
    unknown = await RawSession(http, url, {"Mcp-Session-Id": "nope"}).post(INITIALIZED)
    assert unknown.status == 404
    garbage = await http.post(url, data=b"{not json", headers=first.headers)
    assert garbage.status == 400
    assert json.loads(await garbage.read())["error"]["code"] == -32700
    assert (await first.delete()).status == 200
    again = RawSession(http, url)
    await again.start()
    assert again.headers["Mcp-Session-Id"] != first.headers["Mcp-Session-Id"]


EXITS_AFTER_INIT = (
    "import json, sys\n"
    "req = json.loads(sys.stdin.readline())\n"
    "print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': {"
    "'protocolVersion': '2025-11-25', 'capabilities': {}, "
    "'serverInfo': {'name': 'brief', 'version': '1'}}}), flush=True)\n"
    "sys.stdin.readline()\n"
    "sys.stderr.write('leaving now\\n')\n"
)


async def test_server_exit_answers_the_waiting_request(
    start_gateway: StartGateway, http: aiohttp.ClientSession
) -> None:
    gateway = await start_gateway(bridge_config([sys.executable, "-c", EXITS_AFTER_INIT]))
    session = RawSession(http, gateway.url + "/mcp")
    init = await session.post(INIT)
    session.headers["Mcp-Session-Id"] = init.headers["Mcp-Session-Id"]
    answer = await session.post(call(5, "add", {"a": 1, "b": 2}), ACCEPT_BOTH)
    assert answer.headers["Content-Type"] == "application/json"  # a single answer
    error = json.loads(await answer.read())
    assert error["id"] == 5
    assert error["error"]["code"] == -32000
    assert (await session.post(call(6, "add", {}))).status == 404


async def test_a_command_that_cannot_start_is_a_502(
    start_gateway: StartGateway, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    gateway = await start_gateway(bridge_config([str(tmp_path / "no-such-server")]))
    response = await RawSession(http, gateway.url + "/mcp").post(INIT)
    assert response.status == 502


async def test_gateway_shutdown_kills_every_child(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    path = write_config(tmp_path, bridge_config(SDK_SERVER))
    server = GatewayServer(load_config(str(path)))
    host, port = await server.start("127.0.0.1:0")
    pids: list[int] = []
    for _ in range(2):
        session = RawSession(http, f"http://{host}:{port}/mcp")
        await session.start()
        pids.extend(await session.pids())
    assert all(alive(pid) for pid in pids)
    await server.stop()
    await wait_gone(*pids, within_s=1)


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ({"command": ["srv", ""]}, "non-empty"),
        ({"command": "srv --flag"}, "list"),
        ({"upstream": "http://x", "session_idle_s": 5}, "only for mcp routes with a command"),
        ({"upstream": "http://x", "max_sessions": 5}, "only for mcp routes with a command"),
        ({"command": ["srv"], "session_idle_s": 0}, "greater than 0"),
        ({"command": ["srv"], "max_sessions": 0}, "greater than or equal to 1"),
    ],
    ids=[
        "empty-word",
        "shell-string",
        "idle-without-command",
        "max-without-command",
        "idle-0",
        "max-0",
    ],
)
def test_bridge_keys_are_validated(route: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RouteSpec.model_validate({"name": "t", "type": "mcp", **route})
