"""Starting a server process, before the gateway has imported anything else.

`mendpoint stdio` starts its server the moment its command line is parsed: every module
imported before that (asyncio, the relay, the config) would add to the server's own start-up
instead of overlapping it (docs/performance.md#mcp-start-up). So this needs only `subprocess`:
the server is started from an argv list (never a shell), in its own session so the whole
process group can be signalled (servers launched through `npx` or a shell script leave
grandchildren that killing the direct child would orphan), with every descriptor but its
three pipes closed. `child.Child.attach` hands the pipes to the event loop later; until then,
what the server writes waits in its stdout pipe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Spawned:
    """A started server whose stdin and stdout the gateway has not begun to use yet."""

    process: subprocess.Popen[bytes]
    stdin: int
    stdout: int
    """The gateway's ends of the two pipes, as file descriptors (stderr is `process.stderr`)."""

    @classmethod
    def spawn(cls, argv: list[str]) -> Spawned:
        """Launch `argv`; OSError when it cannot be started (missing, not executable)."""
        to_child, stdin = os.pipe()
        stdout, from_child = os.pipe()
        try:
            process = subprocess.Popen(
                argv,
                stdin=to_child,
                stdout=from_child,
                stderr=subprocess.PIPE,
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

    @property
    def pid(self) -> int:
        return self.process.pid

    def abandon(self) -> int:
        """Never attached (the config did not load): kill the server's group, reap it, close
        the pipes; its status."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for fd in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                os.close(fd)
        status = self.process.wait()  # killed: at once
        if self.process.stderr is not None:
            self.process.stderr.close()
        return status
