"""Watching the loaded config files and asking for a reload when one changes; what a reload
reads (the file again, with the settings that take effect on restart kept as they run).

Polls the files' modification time, size and inode (portable, no extra dependency) and waits
for them to stay unchanged for `debounce_s` before firing, so an editor's write-rename or a
ConfigMap symlink swap triggers one reload, not several half-written ones.

The files watched are those of the running config and those the last reload named, if it
failed (`ConfigRecord`): an `include:` file that broke a reload, or was missing, is watched
until a reload succeeds, so fixing it is enough. The same record is what the admin
listener's `GET /config` answers: the generation, when it loaded, the files, the last error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from gateway.config.errors import ConfigError
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config

log = logging.getLogger("mendpoint.reload")

# Settings read once when the server starts; a reload that changes them is logged, not applied.
RESTART_ONLY = (
    "listen",
    "admin",
    "admin_token_file",
    "admin_hosts",
    "workers",
    "limits",
    "shutdown",
    "fleet",
    "telemetry",
)

Fingerprint = tuple[tuple[str, int, int, int], ...]


def fingerprint(files: Sequence[str]) -> Fingerprint:
    """(path, mtime_ns, size, inode) for each file; a missing file counts as a change too."""
    marks = []
    for path in files:
        try:
            stat = os.stat(path)
        except OSError:
            marks.append((path, -1, -1, -1))
            continue
        marks.append((path, stat.st_mtime_ns, stat.st_size, stat.st_ino))
    return tuple(marks)


class ConfigWatcher:
    def __init__(
        self,
        files: Callable[[], Sequence[str]],
        on_change: Callable[[], Awaitable[object]],
        interval_s: float = 1.0,
        debounce_s: float = 0.5,
    ) -> None:
        self._files = files
        self._on_change = on_change
        self._interval_s = interval_s
        self._debounce_s = debounce_s
        self._task: asyncio.Task[None] | None = None
        self._seen: Fingerprint = ()
        self._busy = asyncio.Lock()

    def start(self) -> None:
        """Fingerprint now, so a change made right after starting is not taken as the baseline."""
        self._seen = fingerprint(self._files())
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def settle(self) -> None:
        """Take the files as they are now as loaded: a reload made elsewhere (SIGHUP, the
        console's "Save") is not made again when the next poll sees the files it read."""
        self._seen = fingerprint(self._files())

    @contextlib.asynccontextmanager
    async def reloading(self) -> AsyncIterator[None]:
        """Every reload runs inside this, one at a time, and settles when it ends (loaded or
        failed: a failed one's files are then watched as they are). The poll waits for a
        reload under way before it fires, so the console's "Save", which writes the file and
        reloads, is not reloaded a second time by a poll that saw the write mid-load."""
        async with self._busy:
            try:
                yield
            finally:
                self.settle()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            current = fingerprint(self._files())
            if current == self._seen:
                continue
            while True:  # debounce: wait until the files stop changing
                await asyncio.sleep(self._debounce_s)
                settled = fingerprint(self._files())
                if settled == current:
                    break
                current = settled
            async with self._busy:  # a reload under way elsewhere ends first
                pass
            if fingerprint(self._files()) == self._seen:
                continue  # that reload read these files already
            log.info("config file changed; reloading")
            try:
                await self._on_change()
            except Exception:
                log.exception("reload after a file change failed")
            self.settle()


def one_reload_at_a_time(watcher: ConfigWatcher | None) -> AbstractAsyncContextManager[None]:
    """Where a reload runs: the watcher's `reloading()`, or nothing to wait for without one."""
    return contextlib.nullcontext() if watcher is None else watcher.reloading()


def reloaded_config(path: str, running: LoadedConfig, *, quiet: bool = False) -> LoadedConfig:
    """A reloaded file, with the running process's restart-only settings: a reload that
    changes them says so (unless `quiet`: the supervisor, whose workers say it) and changes
    nothing they govern (a 413's limit, the limit a refusal's fix names), so what the
    gateway enforces and what it says agree (ConfigError when the file is bad). The fleet's
    password and session keys are read from files `fleet` names: they are kept as well."""
    loaded = load_config(path)
    kept = {}
    for key in RESTART_ONLY:
        if getattr(running.config, key) != getattr(loaded.config, key):
            if not quiet:
                log.warning("config reload: %r changed; it takes effect on restart", key)
            kept[key] = getattr(running.config, key)
    if kept:
        loaded.config = loaded.config.model_copy(update=kept)
    secrets = (
        ("fleet_password", "password_file"),
        ("session_keys", "sessions.key_file"),
        ("fleet_keys", "key_file"),
    )
    for name, key in secrets:
        if getattr(loaded, name) != getattr(running, name):
            if not quiet:
                log.warning("config reload: fleet.%s changed; it takes effect on restart", key)
            setattr(loaded, name, getattr(running, name))
    return loaded


@dataclass(frozen=True, slots=True)
class ReloadError:
    """A reload that failed: when, and what `mendpoint check` would print for it."""

    at: float
    message: str


class ConfigRecord:
    """The running config's generation, when it loaded, the files to watch, and the last
    reload's error while no later one has succeeded (`GET /config`, docs/operations.md)."""

    def __init__(self, loaded: LoadedConfig, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.generation = 1
        self.loaded_at = clock()
        self._running = tuple(loaded.files)
        self._attempted: tuple[str, ...] = ()
        self.last_error: ReloadError | None = None

    def files(self) -> list[str]:
        """The running config's files, then those only the failed reload named."""
        return list(dict.fromkeys((*self._running, *self._attempted)))

    def loaded(self, loaded: LoadedConfig) -> None:
        """A reload succeeded: `loaded` runs now."""
        self.generation += 1
        self.loaded_at = self._clock()
        self._running, self._attempted = tuple(loaded.files), ()
        self.last_error = None

    def failed(self, error: ConfigError) -> None:
        """A reload failed: the running config stays, and the files it named are watched."""
        self._attempted = error.files
        self.last_error = ReloadError(self._clock(), str(error))

    def to_json(self) -> dict[str, Any]:
        error = self.last_error
        return {
            "generation": self.generation,
            "loaded_at": rfc3339(self.loaded_at),
            "files": self.files(),
            "last_error": None
            if error is None
            else {"at": rfc3339(error.at), "message": error.message},
        }


def rfc3339(at: float) -> str:
    """A wall-clock time as RFC 3339 in UTC, to the millisecond."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
    return f"{whole}.{int(at * 1000) % 1000:03d}Z"
