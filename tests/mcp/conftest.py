"""Fixtures of the MCP tests: an SDK-written server over Streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from tests.support.gateway import free_port
from tests.support.paths import MCP_SERVERS
from tests.support.upstreams import wait_listening

SDK_SERVER = MCP_SERVERS / "sdk_server.py"


@pytest.fixture
async def sdk_server(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """`tests/mcp_servers/sdk_server.py http PORT FLAGS…`; FLAGS from indirect parametrize."""
    port = free_port()
    flags: list[str] = list(getattr(request, "param", []))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SDK_SERVER),
        "http",
        str(port),
        *flags,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_listening(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)
