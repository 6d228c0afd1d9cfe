"""A stdio MCP server process, as both `mendpoint stdio` and the bridge run one.

Started from an argv list (never a shell) in its own session, so the whole process group can
be signalled: servers launched through `npx` or a shell script leave grandchildren that
killing the direct child would orphan. stderr is drained continuously to ours, because a
chatty server blocks once the pipe fills. Lines up to `limit` bytes are read whole (asyncio's
64 KiB default breaks on real payloads); longer ones in pieces (`lines.Overlong`).

Starting is two steps, `Spawned.spawn` and `attach`, so `mendpoint stdio` can start the server
before it has read its config (which sets `limit`): the server's start-up and the gateway's
overlap instead of adding up (docs/performance.md#mcp-start-up). Until `attach`, what the
server writes waits in its stdout pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass

from gateway.mcp.lines import Overlong, read_line

STDERR_LINGER_S = 0.5


@dataclass(frozen=True, slots=True)
class Spawned:
    """A started server whose stdin and stdout the gateway has not begun to use yet."""

    process: asyncio.subprocess.Process
    stdin: int
    stdout: int
    """The gateway's ends of the two pipes, as file descriptors."""

    @classmethod
    async def spawn(cls, argv: list[str]) -> Spawned:
        """Launch `argv`; OSError when it cannot be started (missing, not executable)."""
        to_child, stdin = os.pipe()
        stdout, from_child = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=to_child,
                stdout=from_child,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except BaseException:
            os.close(stdin)
            os.close(stdout)
            raise
        finally:
            os.close(to_child)  # the server holds these now
            os.close(from_child)
        return cls(process, stdin, stdout)

    async def attach(self, limit: int) -> Child:
        """The running server, its lines read up to `limit` bytes whole."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(self.stdout, "rb", 0)
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(self.stdin, "wb", 0)
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return Child(self.process, writer, reader, limit, reading)

    def abandon(self) -> None:
        """Never attached (the config did not load): kill the server's group, close the pipes."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for fd in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                os.close(fd)


class Child:
    """One running server: write lines to it, read lines from it, end its process group."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        limit: int,
        reading: asyncio.BaseTransport | None = None,
    ) -> None:
        self.process = process
        self.limit = limit
        self._stdin = stdin
        self._stdout = stdout
        self._reading = reading
        """The stdout pipe's transport: its own, not the subprocess transport's, so it is closed
        here once the server is gone (uvloop refuses to close a loop with it still open)."""
        self._stderr = asyncio.create_task(_drain(process.stderr))

    @classmethod
    async def start(cls, argv: list[str], limit: int) -> Child:
        """Launch `argv`; OSError when it cannot be started (missing, not executable)."""
        return await (await Spawned.spawn(argv)).attach(limit)

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
        if self._reading is not None:
            self._reading.close()
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
