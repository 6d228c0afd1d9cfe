"""A fleet on loopback: a real redis-server, gateway processes sharing it, and HAProxy in
front of them round-robin (Debian's redis-server and haproxy, installed for `make test` by
tests/setup/system-packages.sh)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from examples.fleet_demo import HAPROXY
from tests.support.secrets import write_secret
from tests.support.waits import patience

REPO = Path(__file__).resolve().parents[2]


def program(name: str) -> str:
    """Where a system program is: PATH first, then sbin, which not every user's PATH has."""
    for found in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/local/sbin/{name}"):
        if found and os.access(found, os.X_OK):
            return found
    raise AssertionError(f"{name} is not installed: run tests/setup/system-packages.sh")


def fleet_key(directory: Path) -> str:
    """The key file every replica of one test's fleet is given (`fleet.key_file`, mode
    0600), written once in `directory`; its absolute path."""
    path = directory / "fleet.key"
    if not path.exists():
        write_secret(path, secrets.token_hex(32) + "\n")
    return str(path.resolve())


def wait_port(port: int, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing listens on 127.0.0.1:{port}")
        time.sleep(0.02)


@dataclass
class RedisServer:
    """redis-server on a loopback port of its own, no persistence; stop and start it again
    on the same port to take the store away from a running fleet."""

    port: int
    directory: Path
    password: str | None = None
    process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        args = [
            program("redis-server"),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
        ]
        if self.password is not None:
            args += ["--requirepass", self.password]
        log = (self.directory / "redis.log").open("ab")
        self.process = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log
        )
        log.close()
        await asyncio.to_thread(wait_port, self.port)

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()  # gone at once, as a crashed or partitioned store is
            await self.process.wait()
        self.process = None

    async def command(self, *args: str) -> bytes:
        """One command over a raw RESP connection; the first reply line."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            parts = [b"*%d\r\n" % len(args)]
            for arg in args:
                data = arg.encode()
                parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
            writer.write(b"".join(parts))
            return await reader.readline()
        finally:
            writer.close()

    async def subscribers(self, channel: str) -> int:
        """How many connections listen on `channel` now (PUBSUB NUMSUB's count)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            data = channel.encode()
            writer.write(b"*3\r\n$6\r\nPUBSUB\r\n$6\r\nNUMSUB\r\n$%d\r\n%s\r\n" % (len(data), data))
            for _ in range(3):  # *2, $len, the channel's name
                await reader.readline()
            return int((await reader.readline()).strip().lstrip(b":"))
        finally:
            writer.close()


@dataclass
class GatewayProcess:
    """One `python -m gateway serve` replica, its own process, its log in its directory."""

    name: str
    port: int
    admin: int
    directory: Path
    process: asyncio.subprocess.Process | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin}"

    def log_text(self) -> str:
        return (self.directory / "gateway.log").read_text(errors="replace")

    async def start(self, config: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / "gateway.yaml"
        data = config | {"listen": f"127.0.0.1:{self.port}", "admin": f"127.0.0.1:{self.admin}"}
        path.write_text(yaml.safe_dump(data))
        with (self.directory / "gateway.log").open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--config",
                str(path),
                cwd=self.directory,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        await self.wait_ready()

    async def wait_ready(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + patience(timeout_s)
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                assert self.process is not None and self.process.returncode is None, self.log_text()
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(self.admin_url + "/readyz") as answer:
                        if answer.status == 200:
                            return
                await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name} never became ready:\n{self.log_text()}")

    async def admin_json(self, path: str) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.admin_url + path) as answer,
        ):
            assert answer.status == 200, await answer.text()
            body: dict[str, Any] = await answer.json()
            return body

    async def metrics(self) -> str:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.admin_url + "/metrics") as answer,
        ):
            return await answer.text()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


@dataclass
class RoundRobin:
    """HAProxy in front of the replicas, each request to the next one."""

    port: int
    backends: list[int]
    directory: Path
    process: asyncio.subprocess.Process | None = field(default=None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        servers = "\n".join(
            f"    server r{index} 127.0.0.1:{port}" for index, port in enumerate(self.backends)
        )
        path = self.directory / "haproxy.cfg"
        path.write_text(HAPROXY.format(front=f"127.0.0.1:{self.port}", servers=servers))
        with (self.directory / "haproxy.log").open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                program("haproxy"),
                "-db",
                "-f",
                str(path),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        await asyncio.to_thread(wait_port, self.port)

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample in an exposition, 0 if absent."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


__all__ = ["GatewayProcess", "RedisServer", "RoundRobin", "fleet_key", "program", "sample"]
