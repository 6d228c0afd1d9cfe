"""Composition root: builds the aiohttp application and server from a loaded config.

Refuses to run on aiohttp's pure-Python HTTP parser (the C parser is the one hardened against
request smuggling), owns the shared upstream `ClientSession` through `cleanup_ctx`, and caps
concurrent client connections by answering the excess with a 503 before parsing anything.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import AsyncIterator

from aiohttp import helpers, web

from gateway.config.loader import LoadedConfig
from gateway.config.models import parse_host_port
from gateway.proxy.forward import handle
from gateway.proxy.state import SESSION, STATE, GatewayState
from gateway.proxy.upstream import make_session

log = logging.getLogger("mendpoint")

OVERLOADED_BODY = b"Gateway connection limit reached\n"
OVERLOADED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(OVERLOADED_BODY), OVERLOADED_BODY)
)


class UnsafeRuntime(RuntimeError):
    """The environment would make the gateway unsafe to expose (e.g. pure-Python parser)."""


def require_c_parser() -> None:
    if helpers.NO_EXTENSIONS:
        raise UnsafeRuntime(
            "AIOHTTP_NO_EXTENSIONS is set: the pure-Python HTTP parser is not safe against "
            "request smuggling; unset it to run the gateway"
        )


def build_app(loaded: LoadedConfig) -> web.Application:
    app = web.Application()
    app[STATE] = GatewayState.build(loaded)
    app.cleanup_ctx.append(_upstream_session)
    app.on_cleanup.append(_close_resolver)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def _upstream_session(app: web.Application) -> AsyncIterator[None]:
    session = make_session(app[STATE].loaded.config.limits)
    app[SESSION] = session
    yield
    await session.close()


async def _close_resolver(app: web.Application) -> None:
    await app[STATE].recovery.close()


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(OVERLOADED)
        transport.close()


class GatewayServer:
    """A listening gateway: runner, listening socket and connection cap."""

    def __init__(self, loaded: LoadedConfig) -> None:
        require_c_parser()
        self.loaded = loaded
        limits = loaded.config.limits
        self.runner = web.AppRunner(
            build_app(loaded),
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            keepalive_timeout=limits.keepalive_timeout_s,
            max_line_size=limits.max_line_bytes,
            max_field_size=limits.max_header_bytes,
            max_headers=limits.max_headers,
            shutdown_timeout=10,
        )
        self._server: asyncio.Server | None = None

    async def start(self, listen: str | None = None) -> tuple[str, int]:
        """Bind and serve; returns the bound address (port 0 picks a free port)."""
        await self.runner.setup()
        host, port = parse_host_port(listen or self.loaded.config.listen)
        server = self.runner.server
        assert server is not None
        cap = self.loaded.config.limits.max_client_connections

        def factory() -> asyncio.Protocol:
            if len(server.connections) >= cap:
                return _Refuse()
            return server()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            factory, host, port, reuse_address=True, backlog=1024
        )
        sock: socket.socket = self._server.sockets[0]
        bound = sock.getsockname()
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.runner.cleanup()


async def serve_forever(loaded: LoadedConfig, listen: str | None = None) -> None:
    """Run until SIGINT/SIGTERM, then close listeners and let in-flight requests finish."""
    server = GatewayServer(loaded)
    host, port = await server.start(listen)
    routes = ", ".join(f"{r.prefix} -> {r.upstream} ({r.mode.value})" for r in loaded.config.routes)
    log.info("mendpoint listening on http://%s:%d  routes: %s", host, port, routes)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("mendpoint shutting down")
        await server.stop()
