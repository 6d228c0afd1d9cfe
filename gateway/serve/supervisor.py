"""The supervisor of `mendpoint serve --workers N`: N worker processes on one port.

It gets a config that `cli` has already loaded and validated, reserves the listen address
(gateway.serve.workers) and starts N workers, each `python -m gateway serve ... --worker-link FD`.
Each binds the address with SO_REUSEPORT, and the kernel spreads new connections over them,
so one host's cores are all used. The supervisor serves no traffic. It owns the admin
listener (the workers open none):

- /metrics sums every worker's metrics. Each worker writes them to files in a private
  directory (`observe.MULTIPROC_DIR_ENV`), and `observe.WorkerMetrics` reads them all.
- /readyz answers 200 only while every worker is ready and nothing is draining; /gaps and
  /followups join every worker's table, asked over each link.
- /ui, the console, reads the same sums and the config, which the supervisor reloads as the
  workers do (docs/operations.md#console).

It also counts every worker's bridge sessions against the routes' bounds
(gateway.mcp.session_ledger). Signals: SIGHUP is forwarded to every worker (one not yet ready
gets it once it is), and each reloads as a single gateway does; SIGTERM and SIGINT are
forwarded, and the supervisor waits for every worker to drain, then exits 0 (1 if one had to
be killed).

A worker that exits unexpectedly is started again, after a back-off that doubles from 0.5 s
to 30 s while the worker keeps dying within 10 s of its start. A failure during start-up (bad
port, unsafe runtime, a worker not ready within 60 s) stops everything: exit status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import os
import secrets
import signal
import socket
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from gateway.config.errors import ConfigError
from gateway.config.loaded import LoadedConfig
from gateway.config.model_base import parse_host_port
from gateway.config.watch import ConfigRecord, ConfigWatcher, one_reload_at_a_time, reloaded_config
from gateway.mcp.bridge_owners import BRIDGE_NS_ENV
from gateway.mcp.session_ledger import Ledger, answer_claim
from gateway.serve import listeners, process_tuning
from gateway.serve.admin import (
    admin_tokens,
    build_admin_app,
    warn_if_exposed,
)
from gateway.serve.worker_process import STABLE_S, Worker, backoff_s, describe_exit
from gateway.serve.worker_tables import WorkerTables, workers_details
from gateway.serve.workers import LINK_LIMIT, MetricsDir, format_host_port, reserve
from gateway.telemetry.metrics import samples_of
from gateway.telemetry.multiprocess import (
    MULTIPROC_DIR_ENV,
    SupervisorMetrics,
    WorkerCounters,
    retire_worker,
    worker_exposition,
)

log = logging.getLogger("mendpoint.workers")

STARTUP_TIMEOUT_S = 60.0
ASK_TIMEOUT_S = 2.0
KILL_MARGIN_S = 10.0  # past drain delay + grace, a worker that has not exited is killed


# --- the supervisor --------------------------------------------------------------------------


class Supervisor:
    """Starts, watches, restarts, signals and drains the workers; serves the admin port."""

    def __init__(
        self,
        count: int,
        argv: Sequence[str],
        listen: str,
        admin: str | None,
        loaded: LoadedConfig,
        config_path: str | None = None,
    ) -> None:
        self.count = count
        self._argv = list(argv)
        self._listen = listen
        self._admin = admin
        self.loaded = loaded
        self.record = ConfigRecord(loaded)  # as each worker's: GET /config, the files watched
        self._config_path = config_path
        self._reloads: set[asyncio.Task[None]] = set()
        self._watcher: ConfigWatcher | None = None
        self._shutdown = loaded.config.shutdown
        self._workers: dict[int, Worker] = {}
        self._restarts = [0] * count
        self._all_ready_once = False
        self._stopping = False
        self._failed = False
        self._stop_signal = signal.SIGTERM
        self._stopped = asyncio.Event()
        self._ids = itertools.count(1)
        self.tables = WorkerTables(self._ask_all)  # the admin's /gaps, its reset, /followups
        self._env: dict[str, str] = {}
        self._metrics_path = ""
        self.address = listen
        self.admin_address: tuple[str, int] | None = None
        self.metrics = SupervisorMetrics()
        self.sessions = Ledger()  # every worker's bridge sessions

    @property
    def ready(self) -> bool:
        return (
            not self._stopping
            and len(self._workers) == self.count
            and all(w.ready for w in self._workers.values())
        )

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT (0), or until start-up fails (1)."""
        metrics = MetricsDir()
        try:
            held, self.address = reserve(self._listen)
            try:
                return await self._run(metrics.path)
            finally:
                for sock in held:
                    sock.close()
        finally:
            metrics.remove()

    async def _run(self, metrics_path: str) -> int:
        self._metrics_path = metrics_path
        # The workers' Unix sockets for bridge sessions (gateway.mcp.bridge_owners).
        bridge_ns = f"mendpoint-{os.getpid()}-{secrets.token_hex(8)}"
        self._env = {**os.environ, MULTIPROC_DIR_ENV: metrics_path, BRIDGE_NS_ENV: bridge_ns}
        for inherited in ("MENDPOINT_WORKERS", MULTIPROC_DIR_ENV.lower()):
            self._env.pop(inherited, None)
        self.metrics.workers.labels(state="configured").set(self.count)
        self._update_gauges()
        admin_runner = await self._start_admin(metrics_path) if self._admin else None
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._request_stop, signal.SIGTERM)
        loop.add_signal_handler(signal.SIGINT, self._request_stop, signal.SIGINT)
        loop.add_signal_handler(signal.SIGHUP, self._forward_hup)
        watcher = self._watcher = ConfigWatcher(self.record.files, self._reload)
        if self._config_path is not None:
            watcher.start()
        slots = [loop.create_task(self._slot(index)) for index in range(self.count)]
        try:
            await self._stopped.wait()
            clean = await self._drain(slots)
        finally:
            await watcher.stop()
            for task in slots:
                task.cancel()
            await asyncio.gather(*slots, return_exceptions=True)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            if admin_runner is not None:
                await admin_runner.cleanup()
        log.info("mendpoint stopped")
        return 1 if self._failed or not clean else 0

    async def _start_admin(self, metrics_path: str) -> web.AppRunner:
        assert self._admin is not None
        host, port = parse_host_port(self._admin)
        tokens = admin_tokens(self.loaded.admin_token_file)
        warn_if_exposed(host, tokens)
        app = build_admin_app(
            lambda: self.ready,
            self.tables.gaps,
            metrics=worker_exposition(metrics_path, lambda: self.ready, self.metrics),
            details=self.details,
            followups=self.tables.followups,
            tokens=tokens,
            hosts=self.loaded.config.admin_hosts,
            config=lambda: self.loaded,
            config_status=self.record.to_json,
            counters=samples_of(WorkerCounters(metrics_path)),
            reset=self.tables.reset_gaps,
            reload=self._console_reload,
        )
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await listeners.site(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        bound = runner.addresses[0]
        self.admin_address = (str(bound[0]), int(bound[1]))
        log.info(
            "admin listening on http://%s (/metrics /readyz /gaps /followups /ui …), for %d "
            "workers",
            format_host_port(*self.admin_address),
            self.count,
        )
        return runner

    # -- one slot: a worker, and the next one when it exits ------------------------------------

    async def _slot(self, index: int) -> None:
        streak = 0
        while not self._stopping:
            started = time.monotonic()
            try:
                code = await self._run_worker(index)
            except Exception:  # a bug here must not leave the slot empty for good
                log.exception("worker %d: supervising it failed", index)
                code = None
            if self._stopping:
                return
            if not self._all_ready_once:
                log.error("worker %d %s during start-up", index, describe_exit(code))
                self._failed = True
                self._request_stop(signal.SIGINT)
                return
            streak = 1 if time.monotonic() - started >= STABLE_S else streak + 1
            delay = backoff_s(streak)
            log.error(
                "worker %d %s unexpectedly; starting it again in %.1f s",
                index,
                describe_exit(code),
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), delay)
            if self._stopping:
                return
            self._restarts[index] += 1
            self.metrics.restarts.inc()

    async def _run_worker(self, index: int) -> int | None:
        """Start one worker and wait for it to exit; its exit status (None: never started)."""
        parent, child = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                *self._argv,
                "--listen",
                self.address,
                "--worker-link",
                str(child.fileno()),
                pass_fds=(child.fileno(),),
                env=self._env,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,  # terminal signals reach the supervisor only
            )
        except OSError as exc:
            parent.close()
            log.error("cannot start worker %d: %s", index, exc)
            return None
        finally:
            child.close()
        reader, writer = await asyncio.open_connection(sock=parent, limit=LINK_LIMIT)
        worker = Worker(index, process, writer, time.monotonic())
        worker.reader = asyncio.get_running_loop().create_task(self._listen_to(worker, reader))
        self._workers[index] = worker
        self._update_gauges()
        log.info("worker %d started (pid %d)", index, worker.pid)
        if self._stopping:  # a stop arrived while it was being spawned
            worker.signal(signal.SIGTERM)
        timer = asyncio.get_running_loop().call_later(
            STARTUP_TIMEOUT_S, self._startup_overdue, worker
        )
        try:
            code = await process.wait()
        finally:
            timer.cancel()
            worker.reader.cancel()
            writer.close()
            for ask in worker.asks.values():
                if not ask.done():
                    ask.set_result([])
            if self._workers.get(index) is worker:
                del self._workers[index]
            self.sessions.forget(worker.pid)  # its sessions ended with it
            try:
                retire_worker(self._metrics_path, worker.pid)
            except OSError as exc:
                log.error("cannot fold worker %d's metrics: %s", worker.index, exc)
            self._update_gauges()
        return code

    def _startup_overdue(self, worker: Worker) -> None:
        if not worker.attached:
            log.error(
                "worker %d (pid %d) not ready after %.0f s; killing it",
                worker.index,
                worker.pid,
                STARTUP_TIMEOUT_S,
            )
            worker.signal(signal.SIGKILL)

    async def _listen_to(self, worker: Worker, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ValueError, ConnectionError):
            while line := await reader.readline():
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                if "ready" in message:
                    self._on_ready(worker, message["ready"] is True)
                if "followup" in message:
                    self._share_followup(worker, message["followup"])
                if (answer := answer_claim(self.sessions, worker.pid, message)) is not None:
                    worker.send(answer)
                ask_id = message.get("id")
                ask = worker.asks.pop(ask_id, None) if isinstance(ask_id, int) else None
                if ask is not None and not ask.done():
                    ask.set_result(message)

    def _share_followup(self, origin: Worker, event: object) -> None:
        """One worker's open or settled failure, to the others (gateway.feedback.followups)."""
        for worker in self._workers.values():
            if worker is not origin:
                worker.send({"followup": event})

    def _on_ready(self, worker: Worker, ready: bool) -> None:
        first = not worker.attached
        worker.attached = True
        worker.ready = ready
        if first:
            log.info("worker %d ready (pid %d)", worker.index, worker.pid)
            if worker.hup_pending:
                worker.hup_pending = False
                worker.signal(signal.SIGHUP)
        self._update_gauges()
        if not self._all_ready_once and self.ready:
            self._all_ready_once = True
            log.info(
                "mendpoint listening on http://%s with %d workers (pids %s)",
                self.address,
                self.count,
                " ".join(str(self._workers[i].pid) for i in sorted(self._workers)),
            )

    def _update_gauges(self) -> None:
        gauge = self.metrics.workers
        gauge.labels(state="running").set(len(self._workers))
        gauge.labels(state="ready").set(sum(w.ready for w in self._workers.values()))

    # -- signals ---------------------------------------------------------------------------

    def _forward_hup(self) -> None:
        log.info("SIGHUP: every worker reloads its config")
        self._signal_workers()
        task = asyncio.get_running_loop().create_task(self._reload())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _console_reload(self) -> bool:
        """The console's "Save": every worker reloads, and so does the supervisor's config."""
        self._signal_workers()
        await self._reload()
        return self.record.last_error is None

    def _signal_workers(self) -> None:
        for worker in self._workers.values():
            if worker.attached:
                worker.signal(signal.SIGHUP)
            else:  # still starting: its handler is not installed yet
                worker.hup_pending = True

    async def _reload(self) -> None:
        """The console's config, reloaded as each worker reloads its own (SIGHUP, a changed
        file); a bad file keeps the running one, and each worker logs why."""
        if self._config_path is None:
            return
        async with one_reload_at_a_time(self._watcher):  # one it did not make: not made again
            load = functools.partial(reloaded_config, self._config_path, self.loaded, quiet=True)
            try:
                self.loaded = await asyncio.get_running_loop().run_in_executor(None, load)
            except ConfigError as exc:
                self.record.failed(exc)
                return
            self.record.loaded(self.loaded)

    def _request_stop(self, signum: int) -> None:
        if not self._stopping:
            self._stopping = True
            self._stop_signal = signal.Signals(signum)
            name = signal.Signals(signum).name
            log.info("mendpoint shutting down (%s): %d workers drain", name, len(self._workers))
            self._update_gauges()
        for worker in self._workers.values():
            # Not attached yet: no handler installed, and SIGTERM's default ends it quietly
            # where SIGINT's would print a KeyboardInterrupt traceback.
            worker.signal(signum if worker.attached else signal.SIGTERM)
        self._stopped.set()

    async def _drain(self, slots: list[asyncio.Task[None]]) -> bool:
        """Wait for every worker to exit; kill what outlives drain + grace. True: all clean."""
        delay = 0.0 if self._stop_signal == signal.SIGINT else self._shutdown.drain_delay_s
        deadline = delay + self._shutdown.grace_s + KILL_MARGIN_S
        _, pending = await asyncio.wait(slots, timeout=deadline)
        if not pending:
            return True
        for worker in list(self._workers.values()):
            log.error("worker %d (pid %d) still running; killing it", worker.index, worker.pid)
            worker.signal(signal.SIGKILL)
        await asyncio.wait(pending, timeout=KILL_MARGIN_S)
        return False

    # -- the admin sources -------------------------------------------------------------------

    def details(self) -> dict[str, object]:
        """For /readyz: each worker's pid, readiness and restart count."""
        return workers_details(self._workers, self._restarts)

    async def _ask_all(self, op: str, **arguments: object) -> list[dict[str, Any]]:
        """One question to every attached worker (gateway.serve.worker_tables joins them)."""
        asked = (self._ask(w, op, arguments) for w in self._workers.values() if w.attached)
        return await asyncio.gather(*asked)

    async def _ask(self, worker: Worker, op: str, arguments: dict[str, object]) -> dict[str, Any]:
        """One question to one worker; its answer, or {} when it gives none in time."""
        ask_id = next(self._ids)
        answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        worker.asks[ask_id] = answer
        worker.send({"id": ask_id, "op": op, **arguments})
        try:
            message = await asyncio.wait_for(answer, ASK_TIMEOUT_S)
        except TimeoutError:
            log.warning("worker %d gave no %s within %.0f s", worker.index, op, ASK_TIMEOUT_S)
            return {}
        finally:
            worker.asks.pop(ask_id, None)
        return message if isinstance(message, dict) else {}


def supervise(
    count: int,
    argv: Sequence[str],
    listen: str,
    admin: str | None,
    loaded: LoadedConfig,
    config_path: str | None = None,
) -> int:
    """Run a supervisor on its own event loop; its exit status."""
    return process_tuning.run(Supervisor(count, argv, listen, admin, loaded, config_path).run())
