"""The access log off the request's path: a bounded queue, written in batches by a thread.

A request's access line is serialised once, on the event loop, and appended to a queue; a
writer thread wakes every `interval_s` (or at once when the gateway stops), takes what has
queued and writes it to the stream in one call. A request never waits for the stream: a
slow or full pipe behind stderr holds up only the writer thread, and when the queue is full
the line is dropped and counted in `mendpoint_access_log_dropped_total`
(docs/operations.md#logs). `close` writes everything still queued, so a clean stop loses no
line. The per-record machinery of `logging` (a LogRecord, handler locks, a formatter call,
a flush per line) cost about a third of the success path's throughput
(docs/performance.md#the-access-log).
"""

from __future__ import annotations

import collections
import threading
from typing import TextIO

from gateway.telemetry.metrics import ACCESS_LOG_DROPPED

DEFAULT_CAPACITY = 65536
"""Lines held at most: at 20,000 requests/s, three seconds of a stream that does not drain."""
DEFAULT_INTERVAL_S = 0.05


class AccessWriter:
    """One per process, started by `gateway.telemetry.logs.setup_logging`."""

    def __init__(
        self,
        stream: TextIO,
        capacity: int = DEFAULT_CAPACITY,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._stream = stream
        self._capacity = capacity
        self._interval_s = interval_s
        self._lines: collections.deque[str] = collections.deque()
        self._wake = threading.Event()
        self._closed = False
        self._write_lock = threading.Lock()  # the thread's batch and close's last one
        self._thread = threading.Thread(target=self._run, name="mendpoint-access", daemon=True)
        self._thread.start()

    def put(self, line: str) -> None:
        """Queue one line; never blocks. A full queue (or a closed writer) drops it, counted."""
        if self._closed or len(self._lines) >= self._capacity:
            ACCESS_LOG_DROPPED.inc()
            return
        self._lines.append(line)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and write every line still queued (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join(timeout_s)
        self._write_batch()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval_s)
            self._write_batch()

    def _write_batch(self) -> None:
        with self._write_lock:
            lines = self._lines
            batch: list[str] = []
            try:
                while True:
                    batch.append(lines.popleft())
            except IndexError:
                pass
            if not batch:
                return
            batch.append("")  # the last line's newline
            try:
                self._stream.write("\n".join(batch))
                self._stream.flush()
            except (OSError, ValueError):  # stderr closed or gone: as logging, carry on
                pass
