"""Real upstream servers run as subprocesses: uvicorn serving tests/support/asgi_app.py."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

from tests.support.gateway import free_port
from tests.support.paths import REPO


@contextlib.asynccontextmanager
async def uvicorn_server(app: str = "tests.support.asgi_app:app") -> AsyncIterator[str]:
    """`python -m uvicorn APP` on a free loopback port; yields its base URL once it listens."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)),
        "--no-access-log",  # errors still logged, with tracebacks, as in production
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await wait_listening(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(5):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


async def wait_listening(port: int, process: asyncio.subprocess.Process) -> None:
    """Until something accepts connections on loopback `port` (10 s), unless `process` exits."""
    for _ in range(200):
        if process.returncode is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise RuntimeError(f"nothing listened on port {port} within 10 s")
