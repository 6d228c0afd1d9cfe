"""Bridge routes under `serve --workers N`: every session works whichever worker a connection
reaches (docs/mcp.md, "The bridge"). The kernel spreads connections over the workers; a
session's child lives in the worker that opened it, and the others relay to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from mcp import Client

from gateway import workers
from tests.support.gateway import free_port
from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS, REPO

pytestmark = pytest.mark.skipif(not workers.supported(), reason="--workers needs Linux")

SDK_STDIO = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
WORKERS = 3
ACCEPT = "application/json, text/event-stream"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    port, admin = free_port(), free_port()
    config = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "workers": WORKERS,
        "routes": [{"name": "tools", "type": "mcp", "command": SDK_STDIO}],
        "log": {"access": False},
        "shutdown": {"drain_delay_s": 0.2, "grace_s": 5},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (tmp_path / "gateway.log").open("ab")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--config",
        str(path),
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    try:
        await wait_ready(f"http://127.0.0.1:{admin}/readyz", process, tmp_path / "gateway.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            process.kill()
            await process.wait()
        log.close()


def read_log(log: Path) -> str:
    return log.read_text(errors="replace")


async def wait_ready(url: str, process: asyncio.subprocess.Process, log: Path) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert process.returncode is None, read_log(log)
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url) as answer:
                    if answer.status == 200:  # the supervisor: every worker is ready
                        return
            await asyncio.sleep(0.2)
    raise AssertionError("the workers did not become ready: " + read_log(log))


async def post(url: str, message: dict[str, Any], session_id: str | None) -> tuple[int, Any, str]:
    """One request on a connection of its own, so the kernel may hand it to any worker."""
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    if session_id:
        headers["Mcp-Session-Id"] = session_id
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
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
    async def one(n: int) -> None:
        async with Client(gateway + "/mcp") as client:
            ok = await client.call_tool("add", {"a": n, "b": 1})
            assert ok.structured_content == {"result": n + 1}
            failed = await client.call_tool("read_note", {"name": "nope"})
            assert failed.is_error is True
            assert failed.meta is not None and "mendpoint/failure" in failed.meta
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} >= {"add", "read_note"}

    await asyncio.gather(*(one(n) for n in range(8)))
