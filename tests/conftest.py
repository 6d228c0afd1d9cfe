"""Shared fixtures: real gateways on loopback in front of real aiohttp upstreams."""

from __future__ import annotations

import asyncio
import compileall
import importlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.serve.app import GatewayServer
from tests.support.frameworks import FrameworkApp, node_app, python_app, running
from tests.support.gateway import (
    RawHandler,
    RawUpstream,
    RunningGateway,
    StartGateway,
    StartRaw,
    StartUpstream,
    write_config,
)
from tests.support.paths import PACKAGE
from tests.support.waits import patience

if os.environ.get("MENDPOINT_TEST_LOOP") == "uvloop":

    def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item
    ) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
        """The tests' own loop, which in-process gateways run on: uvloop under `make
        test-uvloop`, since the gateway uses it wherever it is installed
        (docs/performance.md) and some transports behave differently on it."""
        return {"uvloop": importlib.import_module("uvloop").new_event_loop}


def pytest_sessionstart(session: pytest.Session) -> None:
    """gateway/ byte-compiled before any test starts a gateway process: the suite starts
    hundreds, and where PYTHONDONTWRITEBYTECODE is set (as on the shared machine) each one
    compiled all ~165 modules from source again, about 0.1 s of CPU of its ~0.5 s start
    (docs/development.md#parallel-tests). compileall skips what is up to date."""
    compileall.compile_dir(PACKAGE, quiet=1)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool:
    """The per-test `timeout` (pyproject.toml) is a quiet machine's: stretched by the load
    now, as every start-up wait is (tests/support/waits.py), so a loaded run still stops a
    hung test but not a slow one."""
    scaled = settings._replace(timeout=patience(settings.timeout))
    default = importlib.import_module("pytest_timeout").pytest_timeout_set_timer
    return bool(default(item=item, settings=scaled))


@pytest.fixture
async def start_upstream() -> AsyncIterator[StartUpstream]:
    servers: list[TestServer] = []

    async def start(app: web.Application) -> str:
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("")).rstrip("/")

    yield start
    for server in servers:
        await server.close()


@pytest.fixture
async def start_gateway(tmp_path: Path) -> AsyncIterator[StartGateway]:
    running: list[RunningGateway] = []

    async def start(
        config: dict[str, Any] | LoadedConfig,
        *,
        admin: str | None = None,
        listen: str = "127.0.0.1:0",
    ) -> RunningGateway:
        """A gateway on a free port (or `listen`); a dict config is written to a file it can
        reload from."""
        path = None if isinstance(config, LoadedConfig) else str(write_config(tmp_path, config))
        loaded = config if isinstance(config, LoadedConfig) else load_config(str(path))
        server = GatewayServer(loaded, config_path=path)
        host, port = await server.start(listen, admin)
        session = aiohttp.ClientSession(auto_decompress=False)
        gateway = RunningGateway(f"http://{host}:{port}", server, session)
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        await gateway.session.close()
        await gateway.server.stop()


@pytest.fixture
async def start_raw() -> AsyncIterator[StartRaw]:
    servers: list[asyncio.Server] = []

    async def start(handler: RawHandler) -> RawUpstream:
        upstream = RawUpstream(handler)
        server = await asyncio.start_server(upstream.on_connect, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        upstream.url = f"http://127.0.0.1:{port}"
        return upstream

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


# Real framework apps for the rule packs' live tests: started once per session.
@pytest.fixture(scope="session")
def fastapi_app() -> Iterator[FrameworkApp]:
    with running(python_app("fastapi_app.py"), ("fastapi",)) as [app]:
        yield app


@pytest.fixture(scope="session")
def django_app() -> Iterator[FrameworkApp]:
    with running(python_app("django_app.py"), ("django",)) as [app]:
        yield app


@pytest.fixture(scope="session")
def flask_app() -> Iterator[FrameworkApp]:
    with running(python_app("flask_app.py"), ("flask",)) as [app]:
        yield app


@pytest.fixture(scope="session")
def express_apps() -> Iterator[dict[str, FrameworkApp]]:
    """The same Express app as in development (stack traces) and in production."""
    with running(node_app("express_app.js"), ("development", "production")) as apps:
        yield {app.name: app for app in apps}
