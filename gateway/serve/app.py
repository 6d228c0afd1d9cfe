"""Composition root: builds the aiohttp application and server from a loaded config.

Refuses to run on aiohttp's pure-Python HTTP parser (the C parser is the one hardened against
request smuggling), owns the shared upstream `ClientSession` through `cleanup_ctx`, and caps
concurrent client connections by answering the excess with a 503 before parsing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from aiohttp import web

from gateway.config.errors import ConfigError, Refused
from gateway.config.loaded import LoadedConfig
from gateway.config.model_base import parse_host_port
from gateway.config.models import TelemetrySpec
from gateway.config.watch import ConfigRecord, ConfigWatcher, one_reload_at_a_time, reloaded_config
from gateway.exchange.connection import (
    AnyPathResource,
    AsteriskResource,
    GatewayProtocol,
    close_after_upgrade_request,
)
from gateway.exchange.own_answers import refused_connection
from gateway.exchange.state import UPSTREAM
from gateway.exchange.upstream.pool import UpstreamClient
from gateway.feedback import shared
from gateway.feedback.capture import Captures
from gateway.feedback.followups import FollowupBook
from gateway.feedback.signatures import SignatureBook
from gateway.fence.aiohttp_private import NO_EXTENSIONS, server_handler_kwargs
from gateway.http.followup_watch import FOLLOWUP_BOOK
from gateway.mcp import bridge_owners
from gateway.mcp import sessions_state as mcp_runtime
from gateway.serve import listeners, request_observers
from gateway.serve.admin import admin_tokens, build_admin_app, warn_if_exposed
from gateway.serve.connection_cap import ConnectionCap, Refuse
from gateway.serve.fleet_mcp import SessionRelay, join_fleet
from gateway.serve.generation import CAPTURES, SIGNATURES, STATE, Generation, StateHolder
from gateway.serve.handler import expect, handle
from gateway.serve.listeners import dual_stack_socket
from gateway.serve.process_tuning import settle
from gateway.serve.request_observers import REQUEST_OBSERVERS
from gateway.telemetry.logs import close_access_log, set_access_log
from gateway.telemetry.metrics import READY, RELOADS
from gateway.telemetry.tracing import TRACING, TraceSettings

log = logging.getLogger("mendpoint")


class UnsafeRuntime(Refused, RuntimeError):
    """The environment would make the gateway unsafe to expose (e.g. pure-Python parser)."""


def require_c_parser() -> None:
    if NO_EXTENSIONS:
        raise UnsafeRuntime(
            "AIOHTTP_NO_EXTENSIONS is set: the pure-Python HTTP parser is not safe against "
            "request smuggling; unset it to run the gateway"
        )


def build_app(
    loaded: LoadedConfig,
    signatures: SignatureBook | None = None,
    followups: FollowupBook | None = None,
) -> web.Application:
    app = web.Application()
    app[SIGNATURES] = signatures if signatures is not None else SignatureBook()
    app[CAPTURES] = Captures()
    app.on_cleanup.append(_close_captures)
    app[FOLLOWUP_BOOK] = followups or FollowupBook(loaded.config.followups, origin=os.getpid())
    app.cleanup_ctx.append(_sweep_followups)
    app[REQUEST_OBSERVERS] = request_observers.declared(app[FOLLOWUP_BOOK])
    runtime = mcp_runtime.install(app, loaded)
    app[STATE] = StateHolder(
        Generation.build(loaded, runtime.tools, app[CAPTURES], app[SIGNATURES])
    )
    app.cleanup_ctx.append(_upstream_client)
    app.on_cleanup.append(_close_resolver)
    app.router.register_resource(AnyPathResource(handle, expect))
    app.router.register_resource(AsteriskResource(handle, expect))  # OPTIONS *
    app.on_response_prepare.append(close_after_upgrade_request)
    return app


async def _upstream_client(app: web.Application) -> AsyncIterator[None]:
    client = UpstreamClient(app[STATE].current.exchange.config.limits)
    app[UPSTREAM] = client
    yield
    await client.close()


async def _sweep_followups(app: web.Application) -> AsyncIterator[None]:
    """Settle failures nobody followed up as `abandoned`, a few times per window."""
    book = app[FOLLOWUP_BOOK]

    async def sweep() -> None:
        while True:
            await asyncio.sleep(min(1.0, book.settings.window_s / 4))
            book.sweep()

    task = asyncio.get_running_loop().create_task(sweep())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _close_captures(app: web.Application) -> None:
    await app[CAPTURES].close()


async def _close_resolver(app: web.Application) -> None:
    await app[STATE].current.exchange.recovery.close()


class GatewayServer:
    """A running gateway: data listener with a connection cap, admin listener, reload, drain."""

    def __init__(self, loaded: LoadedConfig, config_path: str | None = None) -> None:
        require_c_parser()
        self.config_path = config_path
        self.record = ConfigRecord(loaded)  # GET /config; the files the watcher polls
        self.watcher: ConfigWatcher | None = None  # each reload runs in its `reloading()`
        self.signatures = SignatureBook()
        self.followups = FollowupBook(loaded.config.followups, origin=os.getpid())
        self.shared = shared.connect(loaded, self.followups, self.signatures)
        self.app = build_app(loaded, self.signatures, self.followups)
        limits = loaded.config.limits
        self.runner = web.AppRunner(
            self.app,
            # A request body is forwarded as the client sent it. aiohttp would inflate a gzip
            # or deflate body by default, and the upstream would read the inflated bytes
            # against the client's Content-Length: a second request smuggled past the route
            # table (docs/transparency.md#request-bodies).
            auto_decompress=False,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            keepalive_timeout=limits.keepalive_timeout_s,
            max_line_size=limits.max_line_bytes,
            max_field_size=limits.max_header_bytes,
            max_headers=limits.max_headers,
            shutdown_timeout=loaded.config.shutdown.grace_s,
        )
        self.admin_runner: web.AppRunner | None = None
        self.admin_address: tuple[str, int] | None = None
        self.ready = False
        self.on_ready: list[Callable[[bool], None]] = []  # told of every readiness change
        self._server: asyncio.Server | None = None
        self.connections = ConnectionCap(limits.max_client_connections)
        self._retired: set[asyncio.Task[None]] = set()
        self._relay: SessionRelay | None = None  # fleet.sessions' internal port

    @property
    def loaded(self) -> LoadedConfig:
        return self.app[STATE].current.exchange.loaded

    async def start(
        self, listen: str | None = None, admin: str | None = None, *, reuse_port: bool = False
    ) -> tuple[str, int]:
        """Bind and serve; returns the bound address (port 0 picks a free port).

        `reuse_port` (SO_REUSEPORT) lets the workers of `serve --workers N` share the port.
        """
        start_tracing(self.loaded.config.telemetry)
        await self.runner.setup()
        host, port = parse_host_port(listen or self.loaded.config.listen)
        server = self.runner.server
        assert server is not None
        cap = self.connections = ConnectionCap(self.loaded.config.limits.max_client_connections)
        loop = asyncio.get_running_loop()

        holder = self.app[STATE]

        def factory() -> asyncio.Protocol:
            if cap.full:
                return Refuse(refused_connection(holder.exchange()))
            # What `server()` builds, with the gateway's precise 414/431 for oversize heads.
            protocol = GatewayProtocol(
                server,
                loop=loop,
                state=holder.exchange,
                on_lost=cap.ended,
                **server_handler_kwargs(server),
            )
            cap.accepted()
            return protocol

        dual = dual_stack_socket(host, port, reuse_port=reuse_port)
        if dual is not None:  # `[::]`: IPv4 clients too (gateway.serve.listeners)
            self._server = await loop.create_server(factory, sock=dual, backlog=1024)
        else:
            self._server = await loop.create_server(
                factory, host, port, reuse_address=True, reuse_port=reuse_port, backlog=1024
            )
        sibling_socket = bridge_owners.own_socket()
        if sibling_socket is not None:  # a worker: its siblings relay bridge sessions here
            await web.UnixSite(self.runner, sibling_socket).start()
        if self.shared is not None:
            await self.shared.store.start(self.shared.received)
        runtime = self.app[mcp_runtime.MCP_RUNTIME]  # tool hints shared; fleet.sessions' port
        self._relay = await join_fleet(
            self.loaded, server, holder, self.shared, runtime, reuse_port
        )
        if admin is not None:
            self.admin_address = await self._start_admin(admin)
        self._set_ready(True)
        sock: socket.socket = self._server.sockets[0]
        bound = sock.getsockname()
        return str(bound[0]), int(bound[1])

    async def _start_admin(self, admin: str) -> tuple[str, int]:
        host, port = parse_host_port(admin)
        tokens = admin_tokens(self.loaded.admin_token_file)
        warn_if_exposed(host, tokens)
        self.admin_runner = web.AppRunner(
            build_admin_app(
                lambda: self.ready,
                self.signatures,
                followups=self.followups,
                tokens=tokens,
                shared=self.shared,
                config=lambda: self.loaded,
                config_status=self.record.to_json,
                hosts=self.loaded.config.admin_hosts,
                reload=self.reload,
            ),
            access_log=None,
        )
        await self.admin_runner.setup()
        await listeners.site(self.admin_runner, host, port).start()
        bound = self.admin_runner.addresses[0]  # whatever the loop's Server class is
        return str(bound[0]), int(bound[1])

    def _set_ready(self, ready: bool) -> None:
        self.ready = ready
        READY.set(1 if ready else 0)
        for observer in self.on_ready:
            observer(ready)

    async def reload(self) -> bool:
        """Load, validate and compile the config file; swap it in only if all of that worked.

        Requests already running keep the state they started with. A bad file leaves the
        running config in place and says why, with file and line.
        """
        if self.config_path is None:
            log.warning("reload requested, but the gateway runs without a config file")
            return False
        async with one_reload_at_a_time(self.watcher):
            loop = asyncio.get_running_loop()
            try:
                running = self.loaded
                state = await loop.run_in_executor(None, self._build, self.config_path, running)
            except ConfigError as exc:
                RELOADS.labels(result="failure").inc()
                self.record.failed(exc)
                log.error("config reload failed; keeping the running config:\n%s", exc)
                return False
            holder = self.app[STATE]
            old = holder.current
            holder.current = state
            config = state.exchange.config
            self.followups.configure(config.followups)
            if self.shared is not None:  # the routes another replica's events may name
                self.shared.routes = frozenset(route.name for route in config.routes)
            set_access_log(config.log.access)
            self.record.loaded(state.exchange.loaded)
            RELOADS.labels(result="success").inc()
            rules = len(state.exchange.loaded.rules)
            log.info("config reloaded from %s (%d rules)", self.config_path, rules)
            self._retire(old)
            return True

    def _build(self, path: str, running: LoadedConfig) -> Generation:
        """The next generation, from the file; run in a thread (loading and compiling)."""
        tools = self.app[mcp_runtime.MCP_RUNTIME].tools
        loaded = reloaded_config(path, running)
        return Generation.build(loaded, tools, self.app[CAPTURES], self.signatures)

    def _retire(self, old: Generation) -> None:
        """Close the old state's resolver client once requests that may use it have ended."""
        linger_s = old.exchange.config.enrich_budget_ms / 1000 * 2 + 1

        async def close_later() -> None:
            await asyncio.sleep(linger_s)
            await old.exchange.recovery.close()

        task = asyncio.get_running_loop().create_task(close_later())
        self._retired.add(task)
        task.add_done_callback(self._retired.discard)

    async def drain(self, delay_s: float | None = None) -> None:
        """Readiness false, wait `drain_delay_s` for load balancers, then stop accepting."""
        self._set_ready(False)
        delay = self.loaded.config.shutdown.drain_delay_s if delay_s is None else delay_s
        log.info("draining: not ready; closing listeners in %.1f s", delay)
        await asyncio.sleep(delay)
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Stop accepting; what is in flight (requests, SSE streams, tunnels, bridge calls)
        gets `shutdown.grace_s` to finish, and then every connection still open is cut, so
        stopping ends within the grace whatever is open (docs/operations.md#reload-and-shutdown).

        aiohttp's own shutdown waits `shutdown_timeout` for each handler, then cancels only
        the request's body and waits as long again: a stream, which reads no body, held the
        drain for twice the grace. Cutting the connection cancels its handler instead
        (`handler_cancellation`), and aiohttp's wait ends with it.
        """
        self._set_ready(False)
        loop = asyncio.get_running_loop()
        stop_by = loop.time() + self.loaded.config.shutdown.grace_s
        self.app[mcp_runtime.MCP_RUNTIME].stop_by = stop_by
        server = self.runner.server
        cut = None if server is None else loop.call_at(stop_by, _cut_connections, server)
        try:
            if self._server is not None:
                self._server.close()
            if self._relay is not None:
                await self._relay.close()
            await self.runner.cleanup()
            if self._server is not None:
                await self._server.wait_closed()  # after the cut: 3.12 waits for connections
        finally:
            if cut is not None:
                cut.cancel()
        if self.admin_runner is not None:
            await self.admin_runner.cleanup()
        if self.shared is not None:
            await self.shared.store.close()  # what is queued is sent if the store answers
        for task in list(self._retired):
            task.cancel()
        await asyncio.to_thread(TRACING.stop)


def start_tracing(spec: TelemetrySpec) -> bool:
    """Traces on when the config or the `OTEL_*` variables name a collector
    (docs/operations.md#traces)."""
    settings = TraceSettings(
        spec.otlp_endpoint,
        spec.service_name,
        spec.sample_ratio,
        spec.headers,
        spec.keep_failures,
        spec.max_kept_failures_per_s,
    )
    return TRACING.start(settings)


def _cut_connections(server: web.Server) -> None:
    """The grace is over: end every client connection still open, each handler cancelled
    with it (a tunnel is counted `cancelled`, a stream's upstream connection is closed)."""
    connections = server.connections
    if connections:
        log.warning("shutdown.grace_s is over: closing %d connections still open", len(connections))
    for connection in connections:
        transport = connection.transport
        if transport is not None:
            transport.abort()


class Supervisor(Protocol):
    """The supervisor this process serves under as one of `serve --workers N`
    (gateway.serve.workers).

    `attach` reports readiness to it from then on and answers its questions; `stop_now` is
    called when the supervisor is gone, so no worker outlives it.
    """

    async def attach(self, server: GatewayServer, stop_now: Callable[[], None]) -> None: ...

    async def close(self) -> None: ...


async def serve_forever(
    loaded: LoadedConfig,
    listen: str | None = None,
    admin: str | None = None,
    config_path: str | None = None,
    supervisor: Supervisor | None = None,
) -> None:
    """Run until SIGINT/SIGTERM; reload on SIGHUP and on config file changes; drain on exit.

    `admin` None runs no admin listener (the caller resolves the config's default). A worker
    under a `supervisor` shares the port with its siblings and has no admin listener.
    """
    server = GatewayServer(loaded, config_path)
    host, port = await server.start(listen, admin, reuse_port=supervisor is not None)
    settle()  # after start-up: what exists now lives forever (gateway.serve.process_tuning)
    routes = ", ".join(
        f"{r.prefix} -> {r.upstream or ' '.join(r.command or [])} ({r.mode.value})"
        for r in loaded.config.routes
    )
    log.info("mendpoint listening on http://%s:%d  routes: %s", host, port, routes)
    if server.admin_address is not None:
        log.info(
            "admin listening on http://%s:%d (/metrics /healthz /readyz /gaps)",
            *server.admin_address,
        )
    stop = asyncio.Event()
    interactive = False
    loop = asyncio.get_running_loop()

    def on_interrupt() -> None:
        nonlocal interactive
        interactive = True  # Ctrl-C at a terminal: nobody's load balancer to wait for
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    pending: set[asyncio.Task[bool]] = set()

    def on_hup() -> None:
        task = loop.create_task(server.reload())
        pending.add(task)
        task.add_done_callback(pending.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    watcher = ConfigWatcher(server.record.files, server.reload)
    if config_path is not None:
        watcher.start()
        server.watcher = watcher
    if supervisor is not None:
        await supervisor.attach(server, on_interrupt)
    try:
        await stop.wait()
        log.info("mendpoint shutting down")
        await server.drain(0.0 if interactive else None)
    finally:
        await watcher.stop()
        await server.stop()
        if supervisor is not None:
            await supervisor.close()
        close_access_log()  # every drained request's line written before the last word
        log.info("mendpoint stopped")
