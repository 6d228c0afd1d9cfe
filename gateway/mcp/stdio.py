"""`mendpoint stdio -- CMD ARGS…`: relay newline-delimited JSON-RPC to a server process.

The server is started from an argv list (never a shell) in its own process group. Lines from
the client are forwarded unchanged (requests are noted in a bounded table); lines from the
server are forwarded unchanged unless they are responses to noted requests that the rules
upgrade. A line that is not JSON passes through untouched. Lines may be up to
`mcp.max_message_bytes` long (asyncio's 64 KiB default breaks on real payloads). stderr is
drained continuously to ours. SIGINT/SIGTERM are forwarded; on shutdown the whole process
group is killed. If the server dies, every request still pending gets a JSON-RPC error, and
the relay exits with the server's status.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import stat
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from gateway.classify import Classifier
from gateway.config.loaded import LoadedConfig
from gateway.failure import Failure, Mode
from gateway.mcp.child import Child
from gateway.mcp.jsonrpc import (
    Pending,
    RequestKey,
    RequestTable,
    encode,
    may_be_response,
    may_need_rewrite,
    parse_message,
    request_key,
    requests_in,
    server_gone,
)
from gateway.mcp.runtime import build_upgrader
from gateway.mcp.upgrade import Upgrader
from gateway.resolve.callers import ANONYMOUS, Caller
from gateway.resolve.service import RecoveryService

log = logging.getLogger("mendpoint.mcp")

EXIT_GRACE_S = 5.0


@dataclass(frozen=True)
class StdioExchange:
    """The `Exchange` of a stdio session: one local caller, the mode given on the command line."""

    mode: Mode
    route_name: str = "stdio"
    path: str = "/"
    caller: Caller = ANONYMOUS
    request_id: str = ""
    idempotent: bool = False


class StdioRelay:
    def __init__(self, argv: list[str], upgrader: Upgrader, mode: Mode) -> None:
        self.argv = argv
        self.upgrader = upgrader
        self.exchange = StdioExchange(mode)
        self.limit = upgrader.settings.max_message_bytes
        self.pending = RequestTable(upgrader.settings.max_tracked_requests)
        self._ids: dict[RequestKey, Any] = {}

    async def run(self) -> int:
        """Run the server until it exits; returns its exit status (128+N if killed by signal N)."""
        child = await Child.start(self.argv, self.limit)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, child.forward, sig)
        out = await _stdout_writer()
        client = await _stdin_reader(self.limit)
        task = asyncio.create_task(self._client_to_server(client, child))
        try:
            await self._server_to_client(child, out)
            status = await child.process.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await child.kill()
        await self._answer_pending(out)
        with contextlib.suppress(ConnectionError):
            await out.drain()
        return status if status >= 0 else 128 - status

    async def _client_to_server(self, client: asyncio.StreamReader, child: Child) -> None:
        try:
            while line := await client.readline():
                message = parse_message(line)
                for key, pending in requests_in(message):
                    self.pending.add(key, pending)
                    self._ids[key] = key[1]
                await child.write(line)
        except (ConnectionError, ValueError):
            pass  # the server closed its stdin, or a line passed the limit
        # The client is gone: give the server a moment to finish, then end it.
        child.close_stdin()
        try:
            await asyncio.wait_for(child.process.wait(), EXIT_GRACE_S)
        except TimeoutError:
            child.signal_group(signal.SIGTERM)

    async def _server_to_client(self, child: Child, out: asyncio.StreamWriter | _FileOut) -> None:
        stdout = child.process.stdout
        assert stdout is not None
        while True:
            line = await child.readline()
            if line is None:  # longer than the limit: relay what is buffered, unparsed
                line = await stdout.read(self.limit)
            elif line and not line.endswith(b"\n"):
                line += b"\n"  # the server's last line, cut short: whatever follows gets its own
            if not line:
                return
            out.write(await self._maybe_upgraded(line))
            with contextlib.suppress(ConnectionError):
                await out.drain()

    async def _maybe_upgraded(self, line: bytes) -> bytes:
        if not self.pending or not may_be_response(line):
            return line
        message = parse_message(line)
        if not isinstance(message, dict) or "method" in message:
            return line
        key = request_key(message.get("id"))
        pending = self.pending.pop(key) if key is not None else None
        if key is not None:
            self._ids.pop(key, None)
        if pending is None or not may_need_rewrite(line):
            return line
        # Each upgraded failure gets its own id: the draft extension's correlationId. There is
        # no access log in stdio mode, so this line is what an operator finds it by.
        exchange = dataclasses.replace(self.exchange, request_id=uuid.uuid4().hex)
        outcome = await self.upgrader.upgrade(message, pending, exchange)
        if outcome is not None and outcome.failure is not None:
            _log_failure(exchange.request_id, pending, outcome.failure)
        new = None if outcome is None or outcome.message is None else encode(outcome.message)
        if new is None:
            return line
        return new + (b"\r\n" if line.endswith(b"\r\n") else b"\n")

    async def _answer_pending(self, out: asyncio.StreamWriter | _FileOut) -> None:
        """The server is gone: no request still waiting may be left without an answer."""
        for key, pending in self.pending.drain():
            error = server_gone(self._ids.pop(key, key[1]), pending.method)
            out.write(json.dumps(error).encode() + b"\n")


def _log_failure(request_id: str, pending: Pending, failure: Failure) -> None:
    log.info(
        "MCP failure %s (rule %s) for %s request_id=%s",
        failure.code,
        failure.rule_id,
        pending.tool or pending.method,
        request_id,
        extra={
            "fields": {
                "request_id": request_id,
                "method": pending.method,
                "tool": pending.tool,
                "code": failure.code,
                "rule": failure.rule_id,
            }
        },
    )


async def _stdin_reader(limit: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    if _is_regular_file(sys.stdin.fileno()):
        # Input redirected from a file: event-loop pipes refuse regular files, and a file is
        # finite, so it is handed over whole.
        reader.feed_data(sys.stdin.buffer.read())
        reader.feed_eof()
        return reader
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


class _FileOut:
    """Output redirected to a regular file: plain blocking writes (a file never stalls)."""

    def write(self, data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    async def drain(self) -> None:
        return None


async def _stdout_writer() -> asyncio.StreamWriter | _FileOut:
    if _is_regular_file(sys.stdout.fileno()):
        return _FileOut()
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    )
    return asyncio.StreamWriter(transport, protocol, None, loop)


def _is_regular_file(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def run_stdio(loaded: LoadedConfig, argv: list[str], mode: Mode) -> int:
    """The `mendpoint stdio` command: relay until the server exits; its status is ours."""
    classifier = Classifier(loaded)
    recovery = RecoveryService.build(loaded)
    upgrader = build_upgrader(loaded, classifier, recovery)

    async def main() -> int:
        try:
            return await StdioRelay(argv, upgrader, mode).run()
        finally:
            await recovery.close()

    return asyncio.run(main())
