"""Fixtures of the MCP tests: an SDK-written server over Streamable HTTP on loopback."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.support.paths import MCP_SERVERS
from tests.support.ports import free_port
from tests.support.upstreams import serving

SDK_SERVER = MCP_SERVERS / "sdk_server.py"


@pytest.fixture(scope="module")
def sdk_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """`tests/mcp_servers/sdk_server.py http PORT FLAGS…`; FLAGS from indirect parametrize.
    One per module and FLAGS: the server keeps nothing a test looks at across sessions, and
    each start costs a second of CPU (the SDK's imports)."""
    port = free_port()
    flags: list[str] = list(getattr(request, "param", []))
    with serving([sys.executable, str(SDK_SERVER), "http", str(port), *flags], port):
        yield f"http://127.0.0.1:{port}"
