"""A raw JSON-RPC client for MCP servers over stdio and Streamable HTTP.

Not the SDK: the corpus keeps each response's text exactly as the server (or the gateway)
wrote it, so a success can be compared byte for byte and a failure replayed as it was.
Server-to-client requests (roots/list, sampling) are declined with -32601, as a client that
declares no capabilities would; notifications are read and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from tests.first_action.processes import stop_group

PROTOCOL_VERSION = "2025-06-18"
MAX_LINE = 16 << 20


class Peer(Protocol):
    async def request(self, message: dict[str, Any], timeout_s: float) -> str | None: ...

    async def notify(self, message: dict[str, Any]) -> None: ...

    async def close(self) -> None: ...


def initialize(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "mendpoint-corpus", "version": "1.0"},
        },
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class StdioPeer:
    """A server (or `mendpoint stdio -- server`) on pipes; its stderr goes to `log`."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.waiting: dict[Any, asyncio.Future[str]] = {}
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, argv: list[str], env: dict[str, str], cwd: str, log: Path) -> StdioPeer:
        with log.open("ab") as err:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env={**os.environ, **env},
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                limit=MAX_LINE,
                start_new_session=True,
            )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while True:
            try:
                line = await self.process.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                break
            if not line:
                break
            text = line.decode("utf-8", errors="replace").rstrip("\r\n")
            try:
                message = json.loads(text)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if "method" in message and "id" in message:
                await self._decline(message["id"])
                continue
            future = self.waiting.pop(message.get("id"), None)
            if future is not None and not future.done():
                future.set_result(text)
        for future in self.waiting.values():
            if not future.done():
                future.cancel()

    async def _decline(self, request_id: Any) -> None:
        reply = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}}
        await self._write(reply)

    async def _write(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(ConnectionError):
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            await self.process.stdin.drain()

    async def request(self, message: dict[str, Any], timeout_s: float) -> str | None:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiting[message["id"]] = future
        await self._write(message)
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except (TimeoutError, asyncio.CancelledError):
            self.waiting.pop(message["id"], None)
            return None

    async def notify(self, message: dict[str, Any]) -> None:
        await self._write(message)

    async def close(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(ConnectionError):
                self.process.stdin.close()
        try:
            async with asyncio.timeout(3):
                await self.process.wait()
        except TimeoutError:
            pass
        await stop_group(self.process)
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.reader


class HttpPeer:
    """A Streamable HTTP endpoint: one POST per message, the session id carried after init."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = aiohttp.ClientSession()
        self.session_id: str | None = None
        self.version: str | None = None

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        return headers

    async def request(self, message: dict[str, Any], timeout_s: float) -> str | None:
        try:
            async with asyncio.timeout(timeout_s):
                text = await self._post(message)
        except (TimeoutError, aiohttp.ClientError):
            return None
        if text is not None and message.get("method") == "initialize":
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.version = json.loads(text)["result"]["protocolVersion"]
        return text

    async def _post(self, message: dict[str, Any]) -> str | None:
        async with self.session.post(
            self.url, data=json.dumps(message), headers=self._headers()
        ) as response:
            if response.headers.get("Mcp-Session-Id"):
                self.session_id = response.headers["Mcp-Session-Id"]
            kind = response.headers.get("Content-Type", "")
            if kind.startswith("text/event-stream"):
                return await _matching_event(response, message.get("id"))
            text = await response.text()
            return text if text.strip() else f'{{"http_status": {response.status}}}'

    async def notify(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(aiohttp.ClientError):
            async with self.session.post(
                self.url, data=json.dumps(message), headers=self._headers()
            ) as response:
                await response.read()

    async def close(self) -> None:
        if self.session_id:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with asyncio.timeout(3):
                    await self.session.delete(self.url, headers=self._headers())
        await self.session.close()


async def _matching_event(response: aiohttp.ClientResponse, request_id: Any) -> str | None:
    """The `data:` of the event that answers `request_id` (multi-line data joined by \\n)."""
    data: list[str] = []
    async for raw in response.content:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line == "" and data:
            text = "\n".join(data)
            data = []
            with contextlib.suppress(ValueError):
                message = json.loads(text)
                if isinstance(message, dict) and message.get("id") == request_id:
                    return text
    return None
