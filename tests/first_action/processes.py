"""Starting and stopping the corpus's real servers: each in its own process group, its output
in a log file, ready once its port accepts a connection, stopped by its group id.

A stack that fails to start raises `StartFailed` with the tail of its log, so the run reports
it and goes on to the next stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.support.ports import free_port
from tests.support.waits import patience

STOP_GRACE_S = 2.0


class StartFailed(Exception):
    """A process exited or never listened; the message carries its log's tail."""


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released: refused when connected to)."""
    return free_port()


@dataclass
class Group:
    """The processes of one run, stopped together in reverse order."""

    logs: Path
    started: list[tuple[str, asyncio.subprocess.Process]] = field(default_factory=list)

    async def start(
        self,
        name: str,
        argv: list[str],
        *,
        port: int | None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 30,
        ready_path: str | None = None,
    ) -> None:
        log_path = self.logs / f"{name}.log"
        with log_path.open("ab") as log:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=cwd,
                    env={**os.environ, **(env or {})},
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            except OSError as exc:
                raise StartFailed(f"{name}: cannot run {argv[0]}: {exc}") from exc
        self.started.append((name, process))
        if port is not None:
            await wait_listening(name, process, port, timeout_s, log_path)
            if ready_path is not None:
                await wait_ready(name, port, ready_path, timeout_s, log_path)

    async def stop(self) -> None:
        for _name, process in reversed(self.started):
            await stop_group(process)
        self.started.clear()


async def wait_listening(
    name: str, process: asyncio.subprocess.Process, port: int, timeout_s: float, log: Path
) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise StartFailed(f"{name} exited with {process.returncode}: {tail(log)}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    raise StartFailed(f"{name} did not listen on port {port} in {timeout_s:g} s: {tail(log)}")


async def wait_ready(name: str, port: int, path: str, timeout_s: float, log: Path) -> None:
    """A server that listens before it can answer (a database opening): GET until 2xx."""
    deadline = time.monotonic() + patience(timeout_s)
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                    if response.status < 300:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise StartFailed(f"{name}: {path} was not ready in {timeout_s:g} s: {tail(log)}")


async def stop_group(process: asyncio.subprocess.Process) -> None:
    """SIGTERM to the process's own group, SIGKILL after the grace period."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        async with asyncio.timeout(STOP_GRACE_S):
            await process.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
    # Children that outlived their parent (a daemon's workers) go with the group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def tail(path: Path, chars: int = 1500) -> str:
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return text[-chars:].strip() or "(empty log)"


async def run_command(argv: list[str], cwd: str | None, env: dict[str, str], log: Path) -> None:
    """A set-up step (initdb, git init, a build): it must exit 0 within two minutes."""
    with log.open("ab") as out:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env={**os.environ, **env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        except OSError as exc:
            raise StartFailed(f"cannot run {argv[0]}: {exc}") from exc
    try:
        async with asyncio.timeout(120):
            code = await process.wait()
    except TimeoutError:
        await stop_group(process)
        raise StartFailed(f"{argv!r} ran over two minutes") from None
    if code != 0:
        raise StartFailed(f"{argv!r} exited {code}: {tail(log)}")


@contextlib.asynccontextmanager
async def group(logs: Path) -> AsyncIterator[Group]:
    running = Group(logs)
    try:
        yield running
    finally:
        await running.stop()
