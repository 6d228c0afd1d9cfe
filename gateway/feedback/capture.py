"""Recording failing exchanges for `mendpoint suggest` (a route's `capture:`; docs/rules.md).

Only failures, never successes: the request's method and path, the response's status,
selected headers and body (cut at `max_body_bytes`), and how the gateway classified it, all
after the redaction step. Sampled (`rate`), bounded in files and bytes per directory
(counted from what the directory already holds, so a restart keeps the bound), and written
off the event loop; one JSON file per exchange. Off by default.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.classify.redact import Redactor
from gateway.config.route_model import CaptureSpec
from gateway.failure import Mode
from gateway.observers import Classified, FailureNotes
from gateway.text.json_text import Raw

log = logging.getLogger("mendpoint.capture")

SUFFIX = ".capture.json"
MAX_PENDING = 64  # writes in flight; past it a capture is skipped rather than queued


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
    """The files and bytes one capture directory holds, and the writes under way."""

    path: Path
    files: int = 0
    size: int = 0
    pending: set[asyncio.Future[None]] = field(default_factory=set)

    @classmethod
    def open(cls, path: str) -> CaptureDir:
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        found = cls(directory)
        for entry in directory.glob(f"*{SUFFIX}"):
            found.files += 1
            found.size += entry.stat().st_size
        return found


class Captures:
    """Every route's capture directory, shared by the configs a reload swaps in."""

    def __init__(self) -> None:
        self._dirs: dict[str, CaptureDir] = {}
        self.skipped = 0

    def record(
        self, spec: CaptureSpec, exchange: CapturedFailure, redactor: Redactor, sample: float
    ) -> bool:
        """Start writing `exchange` if it is sampled and fits the bounds; True if it was."""
        if sample >= spec.rate:
            return False
        directory = self._dir(spec.dir)
        if directory is None:
            return False
        data = render(exchange, spec, redactor)
        if (
            directory.files >= spec.max_files
            or directory.size + len(data) > spec.max_bytes
            or len(directory.pending) >= MAX_PENDING
        ):
            self.skipped += 1
            return False
        directory.files += 1
        directory.size += len(data)
        name = f"{int(time.time() * 1000)}-{exchange.request_id[:40]}{SUFFIX}"
        target = directory.path / _safe(name)
        loop = asyncio.get_running_loop()
        write = loop.run_in_executor(None, _write, target, data)
        directory.pending.add(write)
        write.add_done_callback(directory.pending.discard)
        return True

    async def flush(self) -> None:
        """Wait for the writes under way (at shutdown, and in tests)."""
        for directory in self._dirs.values():
            if directory.pending:
                await asyncio.gather(*directory.pending, return_exceptions=True)

    def _dir(self, path: str) -> CaptureDir | None:
        directory = self._dirs.get(path)
        if directory is None:
            try:
                directory = self._dirs[path] = CaptureDir.open(path)
            except OSError as exc:
                log.warning("capture directory %s cannot be used: %s", path, exc)
                return None
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
        if spec is None:
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
    body = exchange.body or b""
    cut = len(body) > spec.max_body_bytes
    # Redacted whole, then cut: a secret cut in two would no longer look like one.
    copied = redactor.body(body.decode("utf-8", "replace"))
    clean = copied.text if isinstance(copied, Raw) else copied
    text = clean.encode("utf-8")[: spec.max_body_bytes].decode("utf-8", "ignore") if cut else clean
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


def _write(target: Path, data: bytes) -> None:
    temporary = target.with_suffix(".part")
    temporary.write_bytes(data)
    os.replace(temporary, target)  # readers never see half a file


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
