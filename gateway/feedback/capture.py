"""Recording failing exchanges for `mendpoint suggest` (a route's `capture:`; docs/rules.md).

Only failures, never successes, and by default only those no rule of the operator's or of a
shipped pack named (`only: unmatched`: the rule that matched is a shipped fallback,
`Classified.is_default`), the ones a draft is for: the request's method and path, the
response's status, selected headers and body (cut at `max_body_bytes`), and how the gateway
classified it, all after the redaction step. Sampled (`rate`) and written off the event loop,
one JSON file per exchange, in the order they were recorded (one writer thread).

Each directory is a ring bounded in files and bytes: past `max_files` or `max_bytes` the
oldest file (by name, which starts with the time it was written in milliseconds, so the order
survives a restart that reads the directory again) is removed to make room. What a bound cost
is counted in `mendpoint_capture_dropped_total{route}` (a file replaced, or a failure not
written at all) and said in a log line at most once a minute per route. Off by default.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.classify.redact import Redactor
from gateway.config.route_model import CaptureSpec
from gateway.failure import Mode
from gateway.observers import Classified, FailureNotes
from gateway.telemetry.metrics import CAPTURE_DROPPED

log = logging.getLogger("mendpoint.capture")

SUFFIX = ".capture.json"
MAX_PENDING = 64  # writes in flight; past it a capture is not written rather than queued
REPORT_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class CapturedFailure:
    """One failing exchange as the capture file records it."""

    route: str
    method: str
    path: str
    status: int | None
    transport: str | None
    headers: Mapping[str, str]
    body: bytes | None
    request_id: str
    rule: str
    code: str
    default_rule: bool
    message: str


@dataclass
class CaptureDir:
    """The files one capture directory holds, oldest first, and the writes under way."""

    path: Path
    held: deque[tuple[str, int]] = field(default_factory=deque)
    """(file name, bytes) of each capture file, oldest first."""
    size: int = 0
    pending: set[asyncio.Future[bool]] = field(default_factory=set)

    @classmethod
    def open(cls, path: str) -> CaptureDir:
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        found = cls(directory)
        entries = []
        for entry in directory.glob(f"*{SUFFIX}"):
            try:
                entries.append((entry.name, entry.stat().st_size))
            except OSError:  # removed while being listed
                continue
        for name, size in sorted(entries):
            found.held.append((name, size))
            found.size += size
        return found

    @property
    def files(self) -> int:
        return len(self.held)

    def make_room(self, spec: CaptureSpec, size: int) -> list[str] | None:
        """The oldest files to remove so that one more of `size` bytes fits the bounds, taken
        off the books now; None when it cannot fit even in an empty directory."""
        if size > spec.max_bytes:
            return None
        removed = []
        while self.held and (len(self.held) >= spec.max_files or self.size + size > spec.max_bytes):
            name, held = self.held.popleft()
            self.size -= held
            removed.append(name)
        return removed


class DropReport:
    """What the capture bounds cost each route: counted at once, logged at most once per
    `interval_s` per route with the counts since its last line."""

    def __init__(self, interval_s: float = REPORT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._since: dict[str, tuple[int, int]] = {}

    def note(self, route: str, replaced: int = 0, dropped: int = 0, why: str = "") -> None:
        if not replaced and not dropped:
            return
        CAPTURE_DROPPED.labels(route=route).inc(replaced + dropped)
        before = self._since.get(route, (0, 0))
        replaced, dropped = before[0] + replaced, before[1] + dropped
        now = time.monotonic()
        last = self._last.get(route)
        if last is not None and now - last < self.interval_s:
            self._since[route] = (replaced, dropped)
            return
        span = "" if last is None else f" in the last {now - last:.0f} s"
        self._last[route] = now
        self._since.pop(route, None)
        log.warning(
            "capture of route %s: %d oldest file(s) replaced and %d failure(s) not recorded%s"
            "%s (mendpoint_capture_dropped_total; logged at most once a minute)",
            route,
            replaced,
            dropped,
            span,
            f": {why}" if why else "",
        )


class Captures:
    """Every route's capture directory, shared by the configs a reload swaps in."""

    def __init__(self) -> None:
        self._dirs: dict[str, CaptureDir] = {}
        self.report = DropReport()
        self._writer: ThreadPoolExecutor | None = None

    def record(
        self, spec: CaptureSpec, exchange: CapturedFailure, redactor: Redactor, sample: float
    ) -> bool:
        """Start writing `exchange` if it is sampled, making room for it in the ring; True if
        it was started."""
        if sample >= spec.rate:
            return False
        route = exchange.route
        directory = self._dir(spec.dir)
        if isinstance(directory, str):
            self.report.note(route, dropped=1, why=directory)
            return False
        if len(directory.pending) >= MAX_PENDING:
            self.report.note(route, dropped=1, why="writes backed up")
            return False
        data = render(exchange, spec, redactor)
        removed = directory.make_room(spec, len(data))
        if removed is None:
            self.report.note(route, dropped=1, why="a capture larger than max_bytes")
            return False
        self.report.note(route, replaced=len(removed))
        name = _safe(f"{int(time.time() * 1000)}-{exchange.request_id[:40]}{SUFFIX}")
        directory.held.append((name, len(data)))
        directory.size += len(data)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="mendpoint-capture")
        loop = asyncio.get_running_loop()
        # One thread: the oldest files go before the new one is written, in order.
        write = loop.run_in_executor(self._writer, _write, directory.path, name, data, removed)
        directory.pending.add(write)
        write.add_done_callback(directory.pending.discard)
        write.add_done_callback(lambda done: self._written(route, done))
        return True

    def _written(self, route: str, done: asyncio.Future[bool]) -> None:
        if not done.cancelled() and done.exception() is None and not done.result():
            self.report.note(route, dropped=1, why="the file could not be written")

    async def flush(self) -> None:
        """Wait for the writes under way (at shutdown, and in tests)."""
        for directory in self._dirs.values():
            if directory.pending:
                await asyncio.gather(*directory.pending, return_exceptions=True)

    async def close(self) -> None:
        """Flush, and end the writer thread (the app's cleanup)."""
        await self.flush()
        if self._writer is not None:
            self._writer.shutdown(wait=False)
            self._writer = None

    def _dir(self, path: str) -> CaptureDir | str:
        """The directory, or why it cannot be used (tried again at the next failure)."""
        directory = self._dirs.get(path)
        if directory is None:
            try:
                directory = self._dirs[path] = CaptureDir.open(path)
            except OSError as exc:
                return f"the directory {path} cannot be used: {exc.strerror or exc}"
        return directory


class CaptureObserver:
    """The routes' `capture:`, as a declared observer of the failure path
    (gateway/observers.py): each classified failure on a capturing route is recorded,
    redacted and sampled."""

    def __init__(
        self, specs: Mapping[str, CaptureSpec], captures: Captures, redactor: Redactor
    ) -> None:
        self.specs = specs
        self.captures = captures
        self.redactor = redactor

    def classified(self, event: Classified) -> None:
        spec = self.specs.get(event.route)
        if spec is None or (spec.only == "unmatched" and not event.is_default):
            return
        captured = CapturedFailure(
            route=event.route,
            method=event.method,
            path=event.path,
            status=event.status,
            transport=event.transport.value if event.transport is not None else None,
            headers=event.headers,
            body=event.body,
            request_id=event.request_id,
            rule=event.rule,
            code=event.failure.code,
            default_rule=event.is_default,
            message=event.failure.message,
        )
        self.captures.record(spec, captured, self.redactor, sample_draw())

    def upgraded(self, route: str, mode: Mode) -> None:
        pass

    def fell_back(self, route: str, reason: str, notes: FailureNotes | None) -> None:
        pass


def sample_draw() -> float:
    """A uniform draw in [0, 1) for `rate` (not security-sensitive)."""
    return random.random()


def render(exchange: CapturedFailure, spec: CaptureSpec, redactor: Redactor) -> bytes:
    text, cut = redactor.copy(exchange.body, spec.max_body_bytes)
    wanted = {name.lower() for name in spec.headers}
    headers = {k: redactor.text(v) for k, v in exchange.headers.items() if k.lower() in wanted}
    record: dict[str, Any] = {
        "version": 1,
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "route": exchange.route,
        "request": {"method": exchange.method, "path": redactor.text(exchange.path)},
        "response": {
            "status": exchange.status,
            "transport": exchange.transport,
            "headers": headers,
            "body": text,
            "truncated": cut,
        },
        "classified": {
            "rule": exchange.rule,
            "code": exchange.code,
            "default_rule": exchange.default_rule,
            "message": redactor.text(exchange.message),
        },
        "request_id": exchange.request_id,
    }
    return json.dumps(record, ensure_ascii=False, indent=1).encode()


def load_dir(path: str, newest: int | None = None) -> list[dict[str, Any]]:
    """Every capture file in `path` (sorted by name: oldest first), or only the `newest` N
    (the console reads a bounded share of a directory that may hold thousands); unreadable
    ones skipped."""
    found = []
    names = sorted(Path(path).glob(f"*{SUFFIX}"))
    for entry in names if newest is None else names[-newest:] if newest > 0 else []:
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("version") == 1:
            found.append(data)
    return found


def _write(directory: Path, name: str, data: bytes, removed: list[str]) -> bool:
    """Remove the files the ring let go, then write `name` (False if it could not be)."""
    for old in removed:
        try:
            (directory / old).unlink()
        except FileNotFoundError:  # removed by someone else (an operator, `suggest`)
            pass
        except OSError as exc:
            log.debug("cannot remove capture %s: %s", old, exc)
    target = directory / name
    temporary = target.with_suffix(".part")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, target)  # readers never see half a file
    except OSError as exc:
        log.debug("cannot write capture %s: %s", target, exc)
        return False
    return True


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
