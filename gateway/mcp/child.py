"""A stdio MCP server process, as both `mendpoint stdio` and the bridge run one.

Started from an argv list (never a shell) in its own session, so the whole process group can
be signalled: servers launched through `npx` or a shell script leave grandchildren that
killing the direct child would orphan. stderr is drained continuously to ours, because a
chatty server blocks once the pipe fills. Lines up to `limit` bytes are read whole (asyncio's
64 KiB default breaks on real payloads); longer ones in pieces (`lines.Overlong`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

from gateway.mcp.lines import Overlong, read_line

STDERR_LINGER_S = 0.5


class Child:
    """One running server: write lines to it, read lines from it, end its process group."""

    def __init__(self, process: asyncio.subprocess.Process, limit: int) -> None:
        self.process = process
        self.limit = limit
        self._stderr = asyncio.create_task(_drain(process.stderr))

    @classmethod
    async def start(cls, argv: list[str], limit: int) -> Child:
        """Launch `argv`; OSError when it cannot be started (missing, not executable)."""
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=limit,
            start_new_session=True,
        )
        return cls(process, limit)

    @property
    def pid(self) -> int:
        return self.process.pid

    async def write(self, data: bytes) -> None:
        """Send bytes to the server's stdin; ConnectionError once it has closed it."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(data)
        await stdin.drain()

    def close_stdin(self) -> None:
        """End of input: a well-behaved server exits when its stdin closes."""
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(ConnectionError, OSError):
                stdin.close()

    async def readline(self) -> bytes | Overlong:
        """The next line (b"" at end of output; the last may lack its newline), or an
        `Overlong` when it passes the length limit: the caller relays or drains its pieces."""
        stdout = self.process.stdout
        assert stdout is not None
        return await read_line(stdout)

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
