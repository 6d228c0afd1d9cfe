"""Test helpers: real gateways on loopback, raw sockets, config files (fixtures: conftest)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from gateway.serve.app import GatewayServer
from tests.support.paths import REPO
from tests.support.waits import patience


@dataclass
class RunningGateway:
    url: str
    server: GatewayServer
    session: aiohttp.ClientSession

    async def request(self, method: str, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
        return await self.session.request(method, self.url + path, **kwargs)


async def start_process(
    *args: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """`python -m gateway ARGS` from the repository, its stderr kept for the test to read."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


def slow_gone_app() -> web.Application:
    """An upstream that answers every path 410 `{"message": "gone"}`, `/slow` after a second:
    a request still in flight when a test stops the gateway."""

    async def handler(request: web.Request) -> web.Response:
        if request.path == "/slow":
            await asyncio.sleep(1.0)
        return web.json_response({"message": "gone"}, status=410)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


async def stop_process(process: asyncio.subprocess.Process) -> tuple[int, str]:
    """SIGTERM (unless it has exited), then its exit code and all it wrote to stderr."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    code = await asyncio.wait_for(process.wait(), 30)
    assert process.stderr is not None
    return code, (await process.stderr.read()).decode()


async def wait_ready(
    session: aiohttp.ClientSession,
    url: str,
    process: asyncio.subprocess.Process | None = None,
    log: Path | None = None,
    ready_s: float = 20,
) -> None:
    """Until `url` (an admin listener's /readyz) answers 200 (`ready_s` on a quiet machine);
    a `process` that exits first fails at once. Either failure shows the `log`."""
    deadline = time.monotonic() + patience(ready_s)
    while time.monotonic() < deadline:
        assert process is None or process.returncode is None, _text_of(log)
        try:
            async with session.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never became ready\n{_text_of(log)}")


def _text_of(log: Path | None) -> str:
    return "" if log is None else log.read_text(errors="replace")


@contextlib.asynccontextmanager
async def supervised(
    config: Path,
    admin: str,
    tmpdir: Path | None,
    env: Mapping[str, str] | None = None,
    ready_s: float = 30,
    workers: int | None = 2,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python -m gateway serve --config CONFIG --workers 2`, a supervisor and its workers
    (`workers=None`: as many as the config says), until `admin`'s /readyz answers 200
    (`ready_s` on a quiet machine); SIGINT and its exit at the end (killed after 20 s).
    TMPDIR is `tmpdir` unless None (where the supervisor keeps the workers' files); `env` is
    the whole environment (default: this one); the output goes to gateway.log beside the
    config, which a failed start shows."""
    log_path = config.parent / "gateway.log"
    with log_path.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gateway", "serve", "--config", str(config)),
            *(() if workers is None else ("--workers", str(workers))),
            cwd=REPO,
            env={
                **(os.environ if env is None else env),
                **({} if tmpdir is None else {"TMPDIR": str(tmpdir)}),
            },
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://{admin}/readyz", process, log_path, ready_s)
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: CIMultiDict[str]
    body: bytes


async def exchange_raw(
    base_url: str, data: bytes, timeout_s: float = 10, source: str | None = None
) -> RawResponse:
    """Write `data` as-is to the server behind `base_url`, read to EOF, parse the head.

    For requests no HTTP client would send (smuggling, hygiene); they ask to close, so the
    answer ends at EOF. `source` binds the client socket to that loopback address (say
    127.0.0.2), so a test can be a peer that `trusted_proxies` does or does not list.
    """
    url = URL(base_url)
    local = (source, 0) if source is not None else None
    reader, writer = await asyncio.open_connection(url.host, url.port, local_addr=local)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout_s):
            raw = await reader.read(-1)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return parse_response(raw)


async def exchange_framed(base_url: str, data: bytes, timeout_s: float = 10) -> RawResponse:
    """Write `data` as-is and read one response framed by its Content-Length, without
    waiting for the server to close (it may linger over a body it never read)."""
    url = URL(base_url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout_s):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(parse_response(head).headers.get("Content-Length", "0"))
            body = await reader.readexactly(length)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return parse_response(head + body)


def parse_response(raw: bytes) -> RawResponse:
    """A whole HTTP/1.1 response as read off the wire (or printed by `curl -i`)."""
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


@dataclass
class Counter:
    """An upstream that counts the requests that reached it, and the body bytes it read."""

    hits: int = 0
    bodies: list[bytes] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.bodies.append(await request.read())
        return web.Response(text="ok")


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
