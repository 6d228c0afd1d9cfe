"""Shared fixtures: real gateways on loopback in front of real aiohttp upstreams."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict
from yarl import URL

from gateway.app import GatewayServer
from gateway.config.loader import LoadedConfig, load_config


@dataclass
class RunningGateway:
    url: str
    server: GatewayServer
    session: aiohttp.ClientSession

    async def request(self, method: str, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
        return await self.session.request(method, self.url + path, **kwargs)


def free_port() -> int:
    """A port nothing listens on right now (for gateways started as subprocesses)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: CIMultiDict[str]
    body: bytes


async def exchange_raw(base_url: str, data: bytes, timeout_s: float = 10) -> RawResponse:
    """Write `data` as-is to the server behind `base_url`, read to EOF, parse the head.

    For requests no HTTP client would send (smuggling, hygiene); they ask to close, so the
    answer ends at EOF.
    """
    url = URL(base_url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout_s):
            raw = await reader.read(-1)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines:
        name, _, value = line.partition(":")
        headers.add(name.strip(), value.strip())
    return RawResponse(int(status_line.split(" ")[1]), headers, body)


StartGateway = Callable[..., Awaitable[RunningGateway]]
StartUpstream = Callable[[web.Application], Awaitable[str]]


def write_config(tmp_path: Path, config: dict[str, Any], name: str = "gateway.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def route_config(upstream: str, **route: Any) -> dict[str, Any]:
    """A one-route config dict in front of `upstream`; route keys override the defaults."""
    return {"routes": [{"name": "api", "prefix": "/", "upstream": upstream, **route}]}


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
        config: dict[str, Any] | LoadedConfig, *, admin: str | None = None
    ) -> RunningGateway:
        """A gateway on a free port; a dict config is written to a file it can reload from."""
        path = None if isinstance(config, LoadedConfig) else str(write_config(tmp_path, config))
        loaded = config if isinstance(config, LoadedConfig) else load_config(str(path))
        server = GatewayServer(loaded, config_path=path)
        host, port = await server.start("127.0.0.1:0", admin)
        session = aiohttp.ClientSession(auto_decompress=False)
        gateway = RunningGateway(f"http://{host}:{port}", server, session)
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        await gateway.session.close()
        await gateway.server.stop()


RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawUpstream:
    """A raw TCP server writing exactly what `handler` writes; counts the connections it was
    sent and notes when each one ended (its handler returned or the peer left)."""

    handler: RawHandler
    url: str = ""
    connections: int = 0
    closed_at: list[float] = field(default_factory=list)

    async def on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed_at.append(time.monotonic())
            writer.close()


StartRaw = Callable[[RawHandler], Awaitable[RawUpstream]]


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
