"""The MCP gateways people would pick instead of Mendpoint, run on the MCP rows' server and
workload (bench/mcp_bench.py), each installed by bench/setup.sh in a folder of its own:

- `contextforge`: IBM ContextForge (PyPI `mcp-contextforge-gateway`; FastAPI on uvicorn), run
  as its README's local quick start does: SQLite in the run's folder, a JWT made with its own
  `create_jwt_token`, the bench's Streamable HTTP server registered as a gateway (POST
  /gateways) and its tool bundled into a virtual server (POST /servers), whose endpoint
  `/servers/ID/mcp` the clients call with the bearer token. ContextForge names the tool
  `<gateway>-<tool>` (`bench-read-file`). Loopback upstreams need `SSRF_ALLOW_LOCALHOST`,
  which its SSRF guard otherwise refuses. Its Redis-backed features fall back to memory.
- `mcp-proxy-ts`: npm `mcp-proxy` (punkpeye), the TypeScript stdio-to-HTTP bridge, serving
  the stdio server on `/mcp`, one child for every session, as PyPI `mcp-proxy` does.
- `supergateway`: npm `supergateway`, stdio to Streamable HTTP in its stateful mode: a child
  per session, as Mendpoint's bridge.

Each is started by `start`, which answers where its clients go (`Endpoint`). What they answer
for the failing call is recorded by the sample check, not assumed (bench/mcp_bench.check).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import harness

ROOT = Path(__file__).resolve().parent.parent
CONTEXTFORGE = ROOT / ".venv" / "bench-contextforge" / "bin"
NODE_PEERS = ROOT / ".venv" / "bench-node" / "node_modules" / ".bin"
CONTEXTFORGE_TOOL = "bench-read-file"
ADMIN_EMAIL = "admin@example.com"
READY_S = 120.0
"""ContextForge runs its database migrations at its first start: tens of seconds here."""


@dataclass(frozen=True)
class Endpoint:
    """Where a system's MCP clients go, and what they send it that others do not need."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    tool: str = "read_file"


Started = tuple[subprocess.Popen[bytes], Endpoint]
Starter = Callable[[str, int, Path, list[str]], Started]


def ts_mcp_proxy(_upstream: str, port: int, root: Path, stdio: list[str]) -> Started:
    argv = [str(NODE_PEERS / "mcp-proxy"), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--server", "stream", "--no-eventStore", "--", *stdio]
    proc = harness.start(argv, root / "mcp-proxy-ts.log")
    endpoint = Endpoint(f"http://127.0.0.1:{port}/mcp")
    harness.wait_ready(endpoint.url, proc)
    return proc, endpoint


def supergateway(_upstream: str, port: int, root: Path, stdio: list[str]) -> Started:
    argv = [str(NODE_PEERS / "supergateway"), "--stdio", " ".join(stdio), "--port", str(port)]
    argv += ["--outputTransport", "streamableHttp", "--stateful", "--logLevel", "none"]
    proc = harness.start(argv, root / "supergateway.log")
    endpoint = Endpoint(f"http://127.0.0.1:{port}/mcp")
    harness.wait_ready(endpoint.url, proc)
    return proc, endpoint


def contextforge(upstream: str, port: int, root: Path, _stdio: list[str]) -> Started:
    """ContextForge on `port`, the server at `upstream` registered and bundled."""
    home = root / f"contextforge-{port}"
    home.mkdir(parents=True, exist_ok=True)
    jwt_secret = secrets.token_hex(32)
    env = {
        **os.environ,
        "JWT_SECRET_KEY": jwt_secret,
        "AUTH_ENCRYPTION_SECRET": secrets.token_hex(32),
        "BASIC_AUTH_PASSWORD": secrets.token_hex(16),
        "PLATFORM_ADMIN_PASSWORD": secrets.token_hex(16),
        "PLATFORM_ADMIN_EMAIL": ADMIN_EMAIL,
        "MCPGATEWAY_ADMIN_API_ENABLED": "true",
        "MCPGATEWAY_UI_ENABLED": "false",
        "DATABASE_URL": f"sqlite:///{home / 'mcp.db'}",
        "SSRF_ALLOW_LOCALHOST": "true",
        "LOG_LEVEL": "WARNING",
    }
    argv = [str(CONTEXTFORGE / "mcpgateway"), "--host", "127.0.0.1", "--port", str(port)]
    with (root / "contextforge.log").open("ab") as log:
        proc = subprocess.Popen(
            harness.pinned(harness.SUT_CORE, argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=home,
            env=env,
        )
    base = f"http://127.0.0.1:{port}"
    _wait_healthy(base + "/health", proc)
    token = _token(jwt_secret, env)
    auth = {"Authorization": f"Bearer {token}"}
    gateway = {"name": "bench", "url": upstream + "/mcp", "transport": "STREAMABLEHTTP"}
    _api(base + "/gateways", auth, gateway)
    tools = _api(base + "/tools", auth, None)
    ids = [t["id"] for t in tools if t.get("name") == CONTEXTFORGE_TOOL]
    if not ids:
        raise RuntimeError(f"contextforge: no {CONTEXTFORGE_TOOL} among {tools!r:.300}")
    server = _api(base + "/servers", auth, {"server": {"name": "bench", "associated_tools": ids}})
    return proc, Endpoint(f"{base}/servers/{server['id']}/mcp", auth, CONTEXTFORGE_TOOL)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"contextforge exited with {proc.returncode} before answering")
        try:
            if harness.fetch(url, timeout=2.0).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not healthy within {READY_S:.0f} s")


def _token(secret: str, env: dict[str, str]) -> str:
    """A bearer token as the README makes one (`mcpgateway.utils.create_jwt_token`)."""
    argv = [str(CONTEXTFORGE / "python"), "-m", "mcpgateway.utils.create_jwt_token"]
    argv += ["--username", ADMIN_EMAIL, "--exp", "600", "--secret", secret]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)
    return done.stdout.strip().splitlines()[-1]


def _api(url: str, headers: dict[str, str], body: object) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="GET" if body is None else "POST",
        headers={**headers, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


STARTERS: dict[str, Starter] = {
    "contextforge": contextforge,
    "mcp-proxy-ts": ts_mcp_proxy,
    "supergateway": supergateway,
}
BEHIND_HTTP = ("contextforge",)
"""Peers in front of the Streamable HTTP server; the others run the stdio server."""

__all__ = ["BEHIND_HTTP", "STARTERS", "Endpoint"]
