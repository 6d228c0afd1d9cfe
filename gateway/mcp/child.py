"""A stdio MCP server process, as both `mendpoint stdio` and the bridge run one.

Started by `spawn.Spawned` (an argv list, its own session, so the whole process group can be
signalled). stderr is drained continuously to ours, because a chatty server blocks once the
pipe fills. Lines up to `limit` bytes are read whole (asyncio's 64 KiB default breaks on real
payloads); longer ones in pieces (`lines.Overlong`).

Starting is two steps, `Spawned.spawn` and `Child.attach`, so `mendpoint stdio` can start the
server before it has imported the event loop or read its config (which sets `limit`): the
server's start-up and the gateway's overlap instead of adding up
(docs/performance.md#mcp-start-up). The server's exit is read by the event loop from a pidfd
(Linux 5.3 and later; elsewhere a thread waits for it), as asyncio's own subprocesses are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading

from gateway.fence.cpython_private import FlowControlMixin
from gateway.mcp.lines import Overlong, read_line
from gateway.mcp.spawn import Spawned

STDERR_LINGER_S = 0.5


class ServerProcess:
    """A started server's process: its pid, its exit status once it has exited, signals."""

    def __init__(self, popen: subprocess.Popen[bytes], exited: asyncio.Future[int]) -> None:
        self._popen = popen
        self._exited = exited

    @classmethod
    def watch(cls, popen: subprocess.Popen[bytes]) -> ServerProcess:
        """Have the running loop note `popen`'s exit (and reap it) when it happens."""
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int] = loop.create_future()

        def reap() -> None:
            status = popen.wait()  # it has exited: at once
            if not exited.done():
                exited.set_result(status)

        try:
            pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):  # no pidfd here: a thread waits instead
            threading.Thread(
                target=lambda: (popen.wait(), loop.call_soon_threadsafe(reap)),
                name=f"wait-{popen.pid}",
                daemon=True,
            ).start()
            return cls(popen, exited)

        def readable() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            reap()

        loop.add_reader(pidfd, readable)
        return cls(popen, exited)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (-N when killed by signal N) once noted, else None."""
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, sig: int) -> None:
        """Signal the server itself, unless it has already been reaped."""
        if not self._exited.done():
            self._popen.send_signal(sig)


class Child:
    """One running server: write lines to it, read lines from it, end its process group."""

    def __init__(
        self,
        process: ServerProcess,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        limit: int,
        pipes: tuple[asyncio.BaseTransport, ...],
        stderr: asyncio.StreamReader,
    ) -> None:
        self.process = process
        self.limit = limit
        self._stdin = stdin
        self._stdout = stdout
        self._pipes = pipes
        """The read pipes' transports (stdout, stderr): closed here once the server is gone
        (uvloop refuses to close a loop with one still open)."""
        self._stderr = asyncio.create_task(_drain(stderr))

    @classmethod
    async def start(cls, argv: list[str], limit: int) -> Child:
        """Launch `argv`; OSError when it cannot be started (missing, not executable)."""
        return await cls.attach(Spawned.spawn(argv), limit)

    @classmethod
    async def attach(cls, spawned: Spawned, limit: int) -> Child:
        """The started server, its lines read up to `limit` bytes whole."""
        loop = asyncio.get_running_loop()
        process = ServerProcess.watch(spawned.process)
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
            os.fdopen(spawned.stdout, "rb", 0),
        )
        stderr = asyncio.StreamReader(loop=loop)
        assert spawned.process.stderr is not None  # spawned with a pipe
        erring, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stderr, loop=loop), spawned.process.stderr
        )
        transport, protocol = await loop.connect_write_pipe(
            FlowControlMixin, os.fdopen(spawned.stdin, "wb", 0)
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return cls(process, writer, reader, limit, (reading, erring), stderr)

    @property
    def pid(self) -> int:
        return self.process.pid

    async def write(self, data: bytes) -> None:
        """Send bytes to the server's stdin; ConnectionError once it has closed it."""
        self._stdin.write(data)
        await self._stdin.drain()

    def close_stdin(self) -> None:
        """End of input: a well-behaved server exits when its stdin closes."""
        with contextlib.suppress(ConnectionError, OSError):
            self._stdin.close()

    async def readline(self) -> bytes | Overlong:
        """The next line (b"" at end of output; the last may lack its newline), or an
        `Overlong` when it passes the length limit: the caller relays or drains its pieces."""
        return await read_line(self._stdout)

    def signal_group(self, sig: int = signal.SIGKILL) -> None:
        """Signal the server's whole process group (it is its own group leader)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def forward(self, sig: signal.Signals) -> None:
        """Pass a signal we received to the server itself."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)

    async def stop(self, grace_s: float) -> int:
        """Close stdin, give the server `grace_s` to exit, then kill its group; its status."""
        self.close_stdin()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), grace_s)
        return await self.kill()

    async def kill(self) -> int:
        """Kill the process group now, reap the server, stop draining; its status."""
        self.signal_group(signal.SIGKILL)
        status = await self.process.wait()
        await self.stop_draining()
        for pipe in self._pipes:
            pipe.close()
        return status

    async def stop_draining(self) -> None:
        """Let the last of stderr through (the pipe closes once the group is gone), then stop."""
        with contextlib.suppress(TimeoutError, OSError):
            await asyncio.wait_for(asyncio.shield(self._stderr), STDERR_LINGER_S)
        self._stderr.cancel()
        await asyncio.gather(self._stderr, return_exceptions=True)


async def _drain(stream: asyncio.StreamReader | None) -> None:
    """Copy the server's stderr to ours as it comes, so a chatty server never blocks on it."""
    if stream is None:
        return
    while chunk := await stream.read(65536):
        sys.stderr.buffer.write(chunk)
        sys.stderr.buffer.flush()
