"""Watching the loaded config files and asking for a reload when one changes; what a reload
reads (the file again, with the settings that take effect on restart kept as they run).

Polls the files' modification time, size and inode (portable, no extra dependency) and waits
for them to stay unchanged for `debounce_s` before firing, so an editor's write-rename or a
ConfigMap symlink swap triggers one reload, not several half-written ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence

from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.config.models import GatewayConfig

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

    def start(self) -> None:
        """Fingerprint now, so a change made right after starting is not taken as the baseline."""
        self._seen = fingerprint(self._files())
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        seen = self._seen
        while True:
            await asyncio.sleep(self._interval_s)
            current = fingerprint(self._files())
            if current == seen:
                continue
            while True:  # debounce: wait until the files stop changing
                await asyncio.sleep(self._debounce_s)
                settled = fingerprint(self._files())
                if settled == current:
                    break
                current = settled
            log.info("config file changed; reloading")
            try:
                await self._on_change()
            except Exception:
                log.exception("reload after a file change failed")
            seen = fingerprint(self._files())


def reloaded_config(path: str, running: GatewayConfig, *, quiet: bool = False) -> LoadedConfig:
    """A reloaded file, with the running process's restart-only settings: a reload that
    changes them says so (unless `quiet`: the supervisor, whose workers say it) and changes
    nothing they govern (a 413's limit, the limit a refusal's fix names), so what the
    gateway enforces and what it says agree (ConfigError when the file is bad)."""
    loaded = load_config(path)
    kept = {}
    for key in RESTART_ONLY:
        if getattr(running, key) != getattr(loaded.config, key):
            if not quiet:
                log.warning("config reload: %r changed; it takes effect on restart", key)
            kept[key] = getattr(running, key)
    if kept:
        loaded.config = loaded.config.model_copy(update=kept)
    return loaded
