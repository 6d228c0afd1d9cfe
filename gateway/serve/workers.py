"""The pieces of `mendpoint serve --workers N` that are not the supervisor itself.

- How many workers: `--workers`, MENDPOINT_WORKERS or `workers:`; `auto` and 0 mean the CPUs
  this process may use, capped by a cgroup CPU quota.
- The link between the supervisor and each worker: a socket pair carrying one JSON object per
  line, and its worker side (`WorkerLink`):

      worker -> supervisor   {"ready": true|false}          on attach and on every change
                             {"id": N, "gaps": [[route, status, text, count, sample],
                              ...], "scope": {...}}   sample: a GapSample's record, or null
                             {"id": N, "reset": {...}}   its gaps reset: the scope
                             {"id": N, "followups": {"window_s": W, "rows": [...],
                              "scope": {...}}}   scope "fleet": the store's, not summed
                             {"followup": {"op": "open"|"close", ...}}  (feedback.followups)
                             {"claim": {"n": N, "route": R, "holder": H, "holder_limit": L,
                              "route_limit": M}}   a bridge session to start (session_ledger)
                             {"release": {"route": R, "holder": H}}   one that ended
      supervisor -> worker   {"id": N, "op": "gaps", "limit": L, "window_s": W}
                             {"id": N, "op": "followups"|"gaps_reset"}
                             {"followup": ...}   another worker's, passed on to every other one
                             {"claimed": {"n": N, "verdict": "granted"|"holder"|"route"}}

  End-of-file on the link tells a worker that its supervisor is gone, however it died: the
  worker stops at once (no drain delay; requests in flight still get `shutdown.grace_s`), so
  no worker outlives its supervisor.
- What the supervisor holds for its workers (gateway.serve.supervisor): a private, locked directory
  for their metric files, and the listen address, reserved so the port stays theirs while
  they come and go.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import glob
import json
import logging
import math
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from gateway.config.model_base import parse_host_port
from gateway.config.models import MAX_WORKERS
from gateway.feedback.signatures import DEFAULT_WINDOW_S
from gateway.feedback.store import StoreDown
from gateway.mcp.session_ledger import WorkerLedger
from gateway.mcp.sessions_state import MCP_RUNTIME
from gateway.serve.admin import FLEET, MAX_GAPS, PROCESS, local_gaps, local_reset, store_down
from gateway.serve.app import GatewayServer
from gateway.serve.listeners import is_any_ipv6

log = logging.getLogger("mendpoint.workers")

WorkerCount = int | Literal["auto"]
LINK_LIMIT = 16 << 20
"""A full gaps table with its samples (200 of 4 KiB), escaped, is below this."""
METRICS_PREFIX = "mendpoint-metrics-"
LOCK_NAME = "supervisor.lock"
STALE_AFTER_S = 60.0


def supported() -> bool:
    """Only Linux's SO_REUSEPORT spreads connections over the sockets sharing a port."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


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
    """Implements `gateway.serve.app.Supervisor` in a worker: reports readiness, answers /gaps."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._asked: set[asyncio.Task[None]] = set()
        self._sessions = WorkerLedger(self._send)

    async def attach(self, server: GatewayServer, stop_now: Callable[[], None]) -> None:
        os.set_inheritable(self._fd, False)  # not into MCP bridge children
        sock = socket.socket(fileno=self._fd)
        reader, self._writer = await asyncio.open_connection(sock=sock, limit=LINK_LIMIT)
        server.on_ready.append(self._report)
        self._report(server.ready)
        server.followups.publish = self._publish_followup
        server.app[MCP_RUNTIME].bridges.counts = self._sessions  # counted by the supervisor
        self._task = asyncio.get_running_loop().create_task(self._serve(reader, server, stop_now))

    def _report(self, ready: bool) -> None:
        self._send({"ready": ready})

    def _publish_followup(self, event: dict[str, object]) -> None:
        self._send({"followup": event})

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
                    if isinstance(message, dict):
                        self._answer(message, server)
        log.warning("the supervisor is gone; stopping (pid %d)", os.getpid())
        stop_now()

    def _answer(self, message: dict[str, Any], server: GatewayServer) -> None:
        if isinstance(message.get("followup"), dict):
            server.followups.apply(message["followup"])
        elif "claimed" in message:
            self._sessions.answered(message["claimed"])
        elif message.get("op") in ("gaps", "followups", "gaps_reset"):
            # With a fleet store the answer is the store's, read within fleet.timeout_ms.
            task = asyncio.get_running_loop().create_task(self._table(message, server))
            self._asked.add(task)
            task.add_done_callback(self._asked.discard)

    async def _table(self, message: dict[str, Any], server: GatewayServer) -> None:
        if message.get("op") == "gaps":
            limit, window_s = message.get("limit"), message.get("window_s")
            top, scope = await local_gaps(server.signatures, server.shared)(
                limit if isinstance(limit, int) else MAX_GAPS,
                window_s if isinstance(window_s, int | float) else DEFAULT_WINDOW_S,
            )
            rows = [
                [
                    g.signature.route,
                    g.signature.status,
                    g.signature.text,
                    g.count,
                    None if g.sample is None else g.sample.record(),
                ]
                for g in top
            ]
            self._send({"id": message.get("id"), "gaps": rows, "scope": scope})
            return
        if message.get("op") == "gaps_reset":
            scope = await local_reset(server.signatures, server.shared)()
            self._send({"id": message.get("id"), "reset": scope})
            return
        book = server.followups
        book.sweep()
        table: dict[str, object] = {"window_s": book.settings.window_s, "scope": PROCESS}
        if server.shared is not None:
            try:
                table |= {"rows": await server.shared.rows(), "scope": FLEET}
            except StoreDown as exc:
                table["scope"] = store_down(str(exc))
        table.setdefault("rows", book.rows())
        self._send({"id": message.get("id"), "followups": table})

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
                _v6only(probe, host)
                probe.bind(address)
    held: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            held.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            _v6only(sock, host)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]
    except OSError:
        for sock in held:
            sock.close()
        raise
    return held, format_host_port(host, port)


def _v6only(sock: socket.socket, host: str) -> None:
    """As the workers bind (gateway.serve.listeners): dual stack for `[::]`, IPv6 alone for any
    other IPv6 address, as asyncio's create_server does; so the reservation matches."""
    if sock.family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if is_any_ipv6(host) else 1)
