"""A real redis-server per test, on a free loopback port (tests/support/fleet.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.fleet import RedisServer
from tests.support.ports import free_port


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(free_port(), directory)
    await server.start()
    yield server
    await server.stop()
