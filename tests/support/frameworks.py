"""Real framework apps (FastAPI, Django + DRF, Flask, Express) as subprocesses on loopback.

Each app lives in tests/frameworks/ and takes its port(s) on the command line. They start
once per test session (fixtures in tests/conftest.py): a framework import costs up to a
second, and every live pack test only sends requests to them.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import aiohttp

from gateway.classify.redact import Redactor
from gateway.config.models import RedactionSpec
from gateway.text.json_text import Raw
from tests.support.gateway import RunningGateway
from tests.support.paths import FRAMEWORKS
from tests.support.ports import free_port
from tests.support.waits import patience

START_TIMEOUT_S = 30.0
REDACTOR = Redactor.build(RedactionSpec())


@dataclass(frozen=True)
class FrameworkApp:
    name: str
    url: str


def python_app(script: str) -> list[str]:
    return [sys.executable, str(FRAMEWORKS / script)]


def node_app(script: str) -> list[str]:
    modules = FRAMEWORKS / "node_modules" / "express"
    if not modules.is_dir():
        raise RuntimeError(f"{modules} is missing: run `make frameworks` (npm ci there)")
    return ["node", str(FRAMEWORKS / script)]


@contextmanager
def running(command: list[str], names: tuple[str, ...]) -> Iterator[list[FrameworkApp]]:
    """Start `command PORT…` (one port per name), wait until every port listens, stop it after."""
    ports = [free_port() for _ in names]
    # The apps log every error's traceback: a file, not a pipe nobody drains, takes them.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [*command, *map(str, ports)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            for port in ports:
                _wait_listening(process, port, log)
            yield [
                FrameworkApp(n, f"http://127.0.0.1:{p}") for n, p in zip(names, ports, strict=True)
            ]
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_listening(process: subprocess.Popen[bytes], port: int, log: IO[bytes]) -> None:
    deadline = time.monotonic() + patience(START_TIMEOUT_S)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            err = log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{process.args!r} exited {process.returncode}: {err}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{process.args!r} did not listen on port {port} in {START_TIMEOUT_S} s")


@dataclass(frozen=True)
class LiveFailure:
    """One failing request sent to a framework app directly and through a gateway."""

    status: int
    direct_body: bytes
    envelope: dict[str, Any]

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = self.envelope["error"]
        return error


async def live_failure(
    gateway: RunningGateway, app: FrameworkApp, method: str, path: str, **kwargs: Any
) -> LiveFailure:
    """Send the same request directly and through `gateway` (asking for the envelope).

    The app's answer must be the same both ways (status, and the body the envelope carries
    in meta.original, after the default redaction step), so what the tests read is what the
    framework really said.
    """
    headers = dict(kwargs.pop("headers", {}))
    async with aiohttp.ClientSession() as session:
        async with session.request(method, app.url + path, headers=headers, **kwargs) as direct:
            direct_status, direct_body = direct.status, await direct.read()
        headers["X-Error-Format"] = "envelope"
        async with session.request(
            method, gateway.url + path, headers=headers, **kwargs
        ) as through:
            status, envelope = through.status, json.loads(await through.read())
    assert status == direct_status, (status, direct_status)
    original = envelope["meta"]["original"]["body"]
    copied = REDACTOR.body(direct_body.decode())
    assert original == (json.loads(copied.text) if isinstance(copied, Raw) else copied)
    return LiveFailure(status, direct_body, envelope)
