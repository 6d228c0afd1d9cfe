"""`mendpoint serve --workers N`: one supervisor process and N worker processes on one port.

The supervisor gets a config that `cli` has already loaded and validated. It reserves the
listen address and starts N workers, each `python -m gateway serve ... --worker-link FD`, and
each binds that address with SO_REUSEPORT. The kernel then spreads new connections over the
workers, so one host's cores are all used. The supervisor serves no traffic. It owns the admin
listener (the workers open none):

- /metrics sums every worker's metrics. Each worker writes them to files in a private
  directory (`observe.MULTIPROC_DIR_ENV`), and `observe.WorkerMetrics` reads them all.
- /readyz answers 200 only while every worker is ready and nothing is draining.
- /gaps merges every worker's table of unmatched signatures.

The link between the supervisor and a worker is a socket pair carrying one JSON object per
line:

    worker -> supervisor   {"ready": true|false}          on attach and on every change
                           {"id": N, "gaps": [[route, status, text, count], ...]}
    supervisor -> worker   {"id": N, "op": "gaps"}

When a worker reads end-of-file on the link, its supervisor is gone. The worker then stops at
once (no drain delay; requests in flight still get `shutdown.grace_s`), so no worker outlives
its supervisor, however the supervisor died.

Signals to the supervisor:

- SIGHUP is forwarded to every worker, and each reloads as a single gateway does. A worker
  that has not finished starting gets the signal once it is ready.
- SIGTERM and SIGINT are forwarded. The supervisor waits for every worker to drain, then
  exits 0.

A worker that exits unexpectedly is started again, after a back-off that doubles from 0.5 s
to 30 s while the worker keeps dying within 10 s of its start. A failure during start-up (bad
port, unsafe runtime, a worker not ready within 60 s) stops everything: exit status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import glob
import itertools
import json
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from aiohttp import web

from gateway import runtime
from gateway.admin import MAX_GAPS, Ranked, build_admin_app
from gateway.app import GatewayServer
from gateway.config.models import MAX_WORKERS, ShutdownSpec, parse_host_port
from gateway.observe import (
    MULTIPROC_DIR_ENV,
    SupervisorMetrics,
    retire_worker,
    worker_exposition,
)
from gateway.signatures import Signature

log = logging.getLogger("mendpoint.workers")

WorkerCount = int | Literal["auto"]
LINK_LIMIT = 4 << 20  # a full gaps table, escaped, is far below this
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
STABLE_S = 10.0  # a worker that ran this long before exiting starts a fresh back-off
STARTUP_TIMEOUT_S = 60.0
GAPS_TIMEOUT_S = 2.0
KILL_MARGIN_S = 10.0  # past drain delay + grace, a worker that has not exited is killed
METRICS_PREFIX = "mendpoint-metrics-"
LOCK_NAME = "supervisor.lock"
STALE_AFTER_S = 60.0


# --- how many -------------------------------------------------------------------------------


def parse_count(text: str) -> WorkerCount:
    """`--workers` and MENDPOINT_WORKERS: `auto`, or a whole number (0 also means auto)."""
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    if not value.isdigit() or int(value) > MAX_WORKERS:
        raise ValueError(f"{text!r} must be auto or a whole number from 0 to {MAX_WORKERS}")
    return int(value)


def resolve_count(count: WorkerCount) -> int:
    return usable_cpus() if count in ("auto", 0) else int(count)


def usable_cpus() -> int:
    """CPUs this process may run on (affinity), capped by a cgroup CPU quota, rounded up.

    In a container with `limits: {cpu: 2}` on a 64-core node this is 2, not 64.
    """
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(count, quota) if quota is not None else count)


def _cgroup_cpu_quota() -> int | None:
    for quota_file, period_file in (
        ("/sys/fs/cgroup/cpu.max", None),  # cgroup v2: "max 100000" or "200000 100000"
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
    ):
        try:
            fields = Path(quota_file).read_text().split()
            if period_file is not None:
                fields.append(Path(period_file).read_text().strip())
            quota, period = int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # absent, "max" or unreadable: no quota from this file
        if quota > 0 and period > 0:
            return math.ceil(quota / period)
    return None


# --- the worker's side of the link ----------------------------------------------------------


class WorkerLink:
    """Implements `gateway.app.Supervisor` in a worker: reports readiness, answers /gaps."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def attach(self, server: GatewayServer, stop_now: Callable[[], None]) -> None:
        os.set_inheritable(self._fd, False)  # not into MCP bridge children
        sock = socket.socket(fileno=self._fd)
        reader, self._writer = await asyncio.open_connection(sock=sock, limit=LINK_LIMIT)
        server.on_ready.append(self._report)
        self._report(server.ready)
        self._task = asyncio.get_running_loop().create_task(self._serve(reader, server, stop_now))

    def _report(self, ready: bool) -> None:
        self._send({"ready": ready})

    def _send(self, message: dict[str, object]) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")

    async def _serve(
        self, reader: asyncio.StreamReader, server: GatewayServer, stop_now: Callable[[], None]
    ) -> None:
        with contextlib.suppress(ValueError, ConnectionError):
            while line := await reader.readline():
                with contextlib.suppress(ValueError):
                    message = json.loads(line)
                    if isinstance(message, dict) and message.get("op") == "gaps":
                        top = server.signatures.top(MAX_GAPS)
                        rows = [[s.route, s.status, s.text, count] for s, count in top]
                        self._send({"id": message.get("id"), "gaps": rows})
        log.warning("the supervisor is gone; stopping (pid %d)", os.getpid())
        stop_now()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()


# --- what the supervisor holds ---------------------------------------------------------------


class MetricsDir:
    """A private directory for the workers' metric files, locked while its supervisor lives.

    Fresh for every supervisor, so a restarted container never sums stale files. Directories
    left by a supervisor that was killed (its lock is free again) are removed at start.
    """

    def __init__(self) -> None:
        root = tempfile.gettempdir()
        sweep_stale(root)
        self.path = tempfile.mkdtemp(prefix=METRICS_PREFIX, dir=root)
        self._lock = open(os.path.join(self.path, LOCK_NAME), "w")  # noqa: SIM115 (held open)
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.close()


def sweep_stale(root: str) -> None:
    now = time.time()
    for path in glob.glob(os.path.join(root, METRICS_PREFIX + "*")):
        try:
            if now - os.stat(path).st_mtime < STALE_AFTER_S:
                continue  # maybe a supervisor that has not taken its lock yet
            with open(os.path.join(path, LOCK_NAME)) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: its owner lives
                shutil.rmtree(path)
        except OSError:
            continue


def format_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reserve(listen: str) -> tuple[list[socket.socket], str]:
    """Hold the listen address for this supervisor's workers; returns it with the real port.

    First a plain bind (SO_REUSEADDR, as a single gateway binds) checks that nothing listens
    there already: SO_REUSEPORT would otherwise let two gateways silently split one port.
    Then bound-but-not-listening SO_REUSEPORT sockets keep the port while workers come and
    go (they receive no connections), and resolve port 0 to one port for every worker.
    """
    host, port = parse_host_port(listen)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if port != 0:
        for family, kind, proto, _, address in infos:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                _v6only(probe)
                probe.bind(address)
    held: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            held.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            _v6only(sock)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]
    except OSError:
        for sock in held:
            sock.close()
        raise
    return held, format_host_port(host, port)


def _v6only(sock: socket.socket) -> None:
    """As asyncio's create_server does, so the reservation matches what workers bind."""
    if sock.family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)


@dataclass(eq=False)
class Worker:
    index: int
    process: asyncio.subprocess.Process
    writer: asyncio.StreamWriter
    started: float
    attached: bool = False  # it has spoken: its signal handlers are installed
    ready: bool = False
    hup_pending: bool = False
    asks: dict[int, asyncio.Future[object]] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signum)

    def send(self, message: dict[str, object]) -> None:
        if not self.writer.is_closing():
            self.writer.write(json.dumps(message).encode() + b"\n")


def describe_exit(code: int | None) -> str:
    if code is None:
        return "could not start"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


def backoff_s(streak: int) -> float:
    """Before restart number `streak` in a row of quick exits: 0.5 s, 1 s, 2 s … at most 30 s."""
    return float(min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, streak - 1)))


# --- the supervisor --------------------------------------------------------------------------


class Supervisor:
    """Starts, watches, restarts, signals and drains the workers; serves the admin port."""

    def __init__(
        self,
        count: int,
        argv: Sequence[str],
        listen: str,
        admin: str | None,
        shutdown: ShutdownSpec,
    ) -> None:
        self.count = count
        self._argv = list(argv)
        self._listen = listen
        self._admin = admin
        self._shutdown = shutdown
        self._workers: dict[int, Worker] = {}
        self._restarts = [0] * count
        self._all_ready_once = False
        self._stopping = False
        self._failed = False
        self._stop_signal = signal.SIGTERM
        self._stopped = asyncio.Event()
        self._ids = itertools.count(1)
        self._env: dict[str, str] = {}
        self._metrics_path = ""
        self.address = listen
        self.admin_address: tuple[str, int] | None = None
        self.metrics = SupervisorMetrics()

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
        self._env = {**os.environ, MULTIPROC_DIR_ENV: metrics_path}
        for inherited in ("MENDPOINT_WORKERS", MULTIPROC_DIR_ENV.lower()):
            self._env.pop(inherited, None)
        self.metrics.workers.labels(state="configured").set(self.count)
        self._update_gauges()
        admin_runner = await self._start_admin(metrics_path) if self._admin else None
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._request_stop, signal.SIGTERM)
        loop.add_signal_handler(signal.SIGINT, self._request_stop, signal.SIGINT)
        loop.add_signal_handler(signal.SIGHUP, self._forward_hup)
        slots = [loop.create_task(self._slot(index)) for index in range(self.count)]
        try:
            await self._stopped.wait()
            clean = await self._drain(slots)
        finally:
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
        app = build_admin_app(
            lambda: self.ready,
            self.gaps,
            metrics=worker_exposition(metrics_path, lambda: self.ready, self.metrics),
            details=self.details,
        )
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        host, port = parse_host_port(self._admin)
        try:
            await web.TCPSite(runner, host, port, reuse_address=True).start()
        except BaseException:
            await runner.cleanup()
            raise
        bound = runner.addresses[0]
        self.admin_address = (str(bound[0]), int(bound[1]))
        log.info(
            "admin listening on http://%s (/metrics /healthz /readyz /gaps), for %d workers",
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
                ask_id = message.get("id")
                ask = worker.asks.pop(ask_id, None) if isinstance(ask_id, int) else None
                if ask is not None and not ask.done():
                    ask.set_result(message.get("gaps"))

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
        for worker in self._workers.values():
            if worker.attached:
                worker.signal(signal.SIGHUP)
            else:  # still starting: its handler is not installed yet
                worker.hup_pending = True

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
        """For /readyz: each worker's pid (None between a crash and its restart), readiness
        and restart count."""
        rows = []
        for index in range(self.count):
            worker = self._workers.get(index)
            rows.append(
                {
                    "worker": index,
                    "pid": worker.pid if worker else None,
                    "ready": worker is not None and worker.ready,
                    "restarts": self._restarts[index],
                }
            )
        return {"workers": rows}

    async def gaps(self, limit: int) -> Ranked:
        """Every worker's table, counts summed per signature; a worker that does not answer
        within `GAPS_TIMEOUT_S` is left out (and logged)."""
        tables = await asyncio.gather(
            *(self._ask_gaps(w) for w in self._workers.values() if w.attached)
        )
        totals: dict[Signature, int] = {}
        for rows in tables:
            for row in rows:
                if (
                    isinstance(row, list)
                    and len(row) == 4
                    and all(isinstance(v, str) for v in row[:3])
                    and isinstance(row[3], int)
                ):
                    signature = Signature(row[0], row[1], row[2])
                    totals[signature] = totals.get(signature, 0) + row[3]
        ranked = sorted(
            totals.items(), key=lambda item: (-item[1], item[0].route, item[0].status, item[0].text)
        )
        return ranked[:limit]

    async def _ask_gaps(self, worker: Worker) -> list[object]:
        ask_id = next(self._ids)
        answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        worker.asks[ask_id] = answer
        worker.send({"id": ask_id, "op": "gaps"})
        try:
            rows = await asyncio.wait_for(answer, GAPS_TIMEOUT_S)
        except TimeoutError:
            log.warning("worker %d gave no gaps within %.0f s", worker.index, GAPS_TIMEOUT_S)
            return []
        finally:
            worker.asks.pop(ask_id, None)
        return rows if isinstance(rows, list) else []


def supported() -> bool:
    """Only Linux's SO_REUSEPORT spreads connections over the sockets sharing a port."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def supervise(
    count: int, argv: Sequence[str], listen: str, admin: str | None, shutdown: ShutdownSpec
) -> int:
    """Run a supervisor on its own event loop; its exit status."""
    return runtime.run(Supervisor(count, argv, listen, admin, shutdown).run())
