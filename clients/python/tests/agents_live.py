"""Real processes for the agents' tests and benchmark: the orders API, `mendpoint serve` in
front of it, and the `mendpoint stdio` command line in front of the tools server.

Standard library only (and tests/support/ports.py, which is too): the LangChain tests run
in a venv of their own (`.venv/agents-langchain`, whose MCP SDK is 1.x), and start the same
processes with the project's interpreter. Configs are written as JSON, which YAML reads as it
is.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
if str(REPO) not in sys.path:  # run as a script (the benchmark): the checkout's helpers
    sys.path.append(str(REPO))

from tests.support.ports import free_port  # noqa: E402  (after the path it needs)

PROJECT_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(PROJECT_PYTHON if PROJECT_PYTHON.exists() else Path(sys.executable))
"""The interpreter with the gateway installed (the project's venv), whichever venv runs us."""
TOOLS_SERVER = HERE / "tools_server.py"
ORDERS_API = HERE / "orders_api.py"
READY_S = 30.0


def write_config(directory: Path, config: dict[str, Any], name: str = "gateway.yaml") -> Path:
    path = directory / name
    path.write_text(json.dumps(config, indent=1))
    return path


def fix_rules(token_file: Path) -> dict[str, Any]:
    """The rules and registry command both scenarios with a `fix_command` use: an expired
    token (the API's 401, the tool's quoted 401), fixed by creating `token_file`."""
    fix = "Refresh the access token, then call again"
    return {
        "commands": {
            "refresh_token": {"run": f"touch {token_file}", "idempotent": True},
        },
        "rules": [
            {
                "id": "token-expired",
                "match": {"status": [401], "headers": {"www-authenticate": "expired"}},
                "error": {
                    "code": "TOKEN_EXPIRED",
                    "category": "AUTH_REQUIRED",
                    "fix_required": fix,
                    "fix_command": "refresh_token",
                },
            },
            {
                "id": "tool-token-expired",
                "match": {"mcp": {"tool": "whoami"}, "body": "token has expired"},
                "error": {
                    "code": "TOKEN_EXPIRED",
                    "category": "AUTH_REQUIRED",
                    "fix_required": fix,
                    "fix_command": "refresh_token",
                },
            },
        ],
    }


def stdio_config(directory: Path, top: dict[str, Any] | None = None) -> Path:
    """A config for `mendpoint stdio` in `directory`: the fix rules (whose command creates
    `directory/tool-token`) and `top`. A config names a route even where none is served."""
    unused = {"name": "unused", "prefix": "/", "upstream": "http://127.0.0.1:9"}
    config = {"routes": [unused], **fix_rules(directory / "tool-token"), **(top or {})}
    return write_config(directory, config, f"stdio-{free_port()}.yaml")


def stdio_command(config: Path, *gateway_args: str) -> list[str]:
    """`mendpoint stdio --config CONFIG -- python tools_server.py stdio`, as an MCP host
    launches it."""
    return [
        PYTHON,
        "-m",
        "gateway",
        "stdio",
        "--config",
        str(config),
        *gateway_args,
        "--",
        PYTHON,
        str(TOOLS_SERVER),
        "stdio",
    ]


def wait_until(
    url: str, process: subprocess.Popen[bytes], log: Path, any_answer: bool = False
) -> None:
    """Until `url` answers 200 (any status with `any_answer`: an MCP endpoint refuses a GET)."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"exited {process.returncode}\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except urllib.error.HTTPError:
            if any_answer:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} never answered\n{log.read_text()}")


@contextlib.contextmanager
def running(
    args: list[str],
    ready_url: str,
    log: Path,
    env: dict[str, str] | None = None,
    any_answer: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        process = subprocess.Popen(
            args,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        wait_until(ready_url, process, log, any_answer)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(frozen=True)
class Api:
    """The orders API and a gateway in front of it."""

    direct: str
    gateway: str
    token_file: Path

    def hits(self) -> dict[str, int]:
        with urllib.request.urlopen(self.direct + "/_hits", timeout=5) as answer:
            counts: dict[str, int] = json.load(answer)
            return counts


@contextlib.contextmanager
def orders_behind_gateway(
    directory: Path, top: dict[str, Any] | None = None, **route: Any
) -> Iterator[Api]:
    """The orders API and `mendpoint serve` in front of it (`route` keys override the
    route's defaults, `top` adds config keys: `headers`, …), until the block ends."""
    token = directory / "api-token"
    api_port, gateway_port, admin_port = free_port(), free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    config = {
        "admin": f"127.0.0.1:{admin_port}",
        "shutdown": {"drain_delay_s": 0},  # nothing balances load onto it: stop at once
        "routes": [{"name": "orders", "prefix": "/", "upstream": api, **route}],
        **fix_rules(token),
        **(top or {}),
    }
    path = write_config(directory, config)
    api_args = [PYTHON, str(ORDERS_API), str(api_port)]
    serve = [PYTHON, "-m", "gateway", "serve", "--config", str(path)]
    serve += ["--listen", f"127.0.0.1:{gateway_port}"]
    with (
        running(api_args, api + "/items/1", directory / "api.log", {"API_TOKEN_FILE": str(token)}),
        running(serve, f"http://127.0.0.1:{admin_port}/readyz", directory / "gateway.log"),
    ):
        yield Api(api, f"http://127.0.0.1:{gateway_port}", token)


@contextlib.contextmanager
def tools_behind_gateway(directory: Path) -> Iterator[str]:
    """The tools server over Streamable HTTP and `mendpoint serve` in front of it (a
    `type: mcp` route at /mcp); yields the gateway's MCP URL."""
    server_port, gateway_port, admin_port = free_port(), free_port(), free_port()
    config = {
        "admin": f"127.0.0.1:{admin_port}",
        "shutdown": {"drain_delay_s": 0},
        "routes": [
            {
                "name": "tools",
                "type": "mcp",
                "prefix": "/mcp",
                "upstream": f"http://127.0.0.1:{server_port}",
            }
        ],
    }
    path = write_config(directory, config, "tools-gateway.yaml")
    server = [PYTHON, str(TOOLS_SERVER), "http", str(server_port)]
    serve = [PYTHON, "-m", "gateway", "serve", "--config", str(path)]
    serve += ["--listen", f"127.0.0.1:{gateway_port}"]
    mcp = f"http://127.0.0.1:{server_port}/mcp"
    with (
        running(server, mcp, directory / "tools.log", any_answer=True),
        running(serve, f"http://127.0.0.1:{admin_port}/readyz", directory / "gateway.log"),
    ):
        yield f"http://127.0.0.1:{gateway_port}/mcp"
