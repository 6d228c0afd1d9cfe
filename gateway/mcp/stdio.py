"""`mendpoint stdio -- CMD ARGS…`: relay newline-delimited JSON-RPC to a server process.

The server is started from an argv list (never a shell) in its own process group. Lines from
the client are forwarded unchanged (requests are noted in a bounded table); lines from the
server are forwarded unchanged unless they are responses to noted requests that the rules
upgrade. A line that is not JSON passes through untouched. Lines up to `mcp.max_message_bytes`
are parsed (asyncio's 64 KiB default breaks on real payloads); longer ones, either way, pass
whole and unparsed, streamed, and the relay goes on. stderr is drained continuously to ours.
SIGINT/SIGTERM are forwarded. When the client closes its input, the server's stdin is closed
and its pending calls get up to `mcp.stdio_grace_s` to finish (as they would run directly);
then the whole process group is ended. If the server dies, every request still pending gets
a JSON-RPC error (each request is answered exactly once), and the relay exits with the
server's status.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
import sys
import time
import uuid
from asyncio import FIRST_COMPLETED
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.failure import Mode, Refusal
from gateway.fence.cpython_private import FlowControlMixin
from gateway.mcp.child import Child
from gateway.mcp.correlation import rewrite_payload
from gateway.mcp.jsonrpc import (
    Pending,
    RequestKey,
    RequestTable,
    cancelled_requests,
    encode,
    may_be_response,
    parse_message,
    request_key,
    requests_in,
)
from gateway.mcp.lines import Overlong, overlong_id, read_line
from gateway.mcp.request_body import parse_request
from gateway.mcp.rpc_errors import server_gone
from gateway.observers import Classified, FailureNotes

if TYPE_CHECKING:
    from gateway.config.relay_limits import RelayLimits
    from gateway.enrich.step import FailureContext
    from gateway.mcp.upgrade import Upgrader
    from gateway.resolve.service import Situation

log = logging.getLogger("mendpoint.mcp")

EXIT_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class StdioCallSite:
    """The `CallSite` of a stdio session: one local caller, the mode given on the command line.

    Each failure gets an id of its own (the draft extension's `correlationId`): there is no
    access log in stdio mode, so the failure's log line (`FailureLog`) is what an operator
    finds it by."""

    mode: Mode
    route_name: str = "stdio"
    path: str = "/"
    idempotent: bool = False
    request_id: str | None = None
    """Every failure's id, where one must be the same each time (a replay); else a new one."""

    def failure_context(self, situation: Situation) -> FailureContext:
        from gateway.enrich.step import FailureContext
        from gateway.resolve.callers import ANONYMOUS

        return FailureContext(
            route=self.route_name,
            mode=self.mode,
            request_id=self.request_id or uuid.uuid4().hex,
            caller=ANONYMOUS,
            situation=situation,
            started=time.monotonic(),
        )


class FailureLog:
    """The failure path's log line in stdio mode, as a declared observer (gateway/observers.py):
    code, rule, tool or method, and the failure's own id."""

    def classified(self, event: Classified) -> None:
        method = "tools/call" if event.tool else event.operation
        log.info(
            "MCP failure %s (rule %s) for %s request_id=%s",
            event.failure.code,
            event.rule,
            event.operation,
            event.request_id,
            extra={
                "fields": {
                    "request_id": event.request_id,
                    "method": method,
                    "tool": event.tool,
                    "code": event.failure.code,
                    "rule": event.rule,
                }
            },
        )

    def upgraded(self, route: str, mode: Mode) -> None:
        pass

    def fell_back(self, route: str, reason: str, notes: FailureNotes | None) -> None:
        pass


class StdioRelay:
    """The relay between this process's stdin/stdout and a server's.

    `upgrader` (the config, the enrichment step) is being built while the relay already runs
    (docs/performance.md#mcp-start-up): nothing waits for it but a response that may need
    upgrading, and the end of a session whose grace comes from the config.
    """

    def __init__(
        self,
        child: Child,
        limits: RelayLimits,
        upgrader: asyncio.Future[Upgrader],
        mode: Mode,
        grace_s: float | None = None,
    ) -> None:
        self.child = child
        self.upgrader = upgrader
        self.site = StdioCallSite(mode)
        self.limits = limits
        self.limit = limits.max_message_bytes
        self.grace_s = grace_s
        """`--grace`; without it the config's `mcp.stdio_grace_s`, once it has loaded."""
        self.pending = RequestTable(limits.max_tracked_requests)
        self._ids: dict[RequestKey, Any] = {}
        self._answered = asyncio.Event()  # set whenever nothing is pending any more

    async def _upgrader(self) -> Upgrader:
        """The upgrader, once built; shielded: a task cancelled while it waits (the client's
        side, when the server exits) must not cancel the building that others wait for."""
        return await asyncio.shield(self.upgrader)

    async def run(self) -> int:
        """Run the server until it exits; returns its exit status (128+N if killed by signal N)."""
        child = self.child
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
            while line := await read_line(client):
                if isinstance(line, Overlong):
                    # Over the limit: not parsed, but delivered whole; the server decides.
                    async for piece in line.pieces():
                        await child.write(piece)
                    continue
                # A line of too many values or a batch too long is relayed unparsed, as an
                # overlong one is: the server decides (docs/security.md#mcp-bodies).
                message = parse_request(line, self.limits)
                self._note(None if isinstance(message, Refusal) else message)
                await child.write(line)
        except ConnectionError:
            pass  # the server closed its stdin
        child.close_stdin()
        await self._let_finish(child)

    def _note(self, message: Any) -> None:
        """Requests to tie responses to; a cancelled request will not be answered."""
        for key, pending in requests_in(message):
            self.pending.add(key, pending)
            self._ids[key] = key[1]
        for cancelled in cancelled_requests(message):
            self._settle(cancelled)

    def _settle(self, key: RequestKey) -> Pending | None:
        """`key` is answered (or will never be): forget it."""
        pending = self.pending.pop(key)
        self._ids.pop(key, None)
        if not self.pending:
            self._answered.set()
        return pending

    async def _let_finish(self, child: Child) -> None:
        """The client closed its input. Run directly, a server answers what it was asked and
        then exits: wait for the calls still pending (up to `grace_s`), give the server
        EXIT_GRACE_S more to exit by itself, then end it."""
        grace_s = self.grace_s or 0.0
        if self.pending and self.grace_s is None:  # the config's, once it has loaded
            grace_s = (await self._upgrader()).settings.stdio_grace_s
        exited = asyncio.ensure_future(child.process.wait())
        try:
            async with asyncio.timeout(grace_s):
                while self.pending and not exited.done():
                    self._answered.clear()
                    answered = asyncio.ensure_future(self._answered.wait())
                    try:
                        await asyncio.wait({exited, answered}, return_when=FIRST_COMPLETED)
                    finally:
                        answered.cancel()
            await asyncio.wait_for(asyncio.shield(exited), EXIT_GRACE_S)
        except TimeoutError:
            child.signal_group(signal.SIGTERM)
        finally:
            if not exited.done():
                exited.cancel()

    async def _server_to_client(self, child: Child, out: asyncio.StreamWriter | _FileOut) -> None:
        while line := await child.readline():
            if isinstance(line, Overlong):
                await self._relay_overlong(line, out)
                continue
            if not line.endswith(b"\n"):
                line += b"\n"  # the server's last line, cut short: whatever follows gets its own
            out.write(await self._maybe_upgraded(line))
            with contextlib.suppress(ConnectionError):
                await out.drain()

    async def _relay_overlong(self, line: Overlong, out: asyncio.StreamWriter | _FileOut) -> None:
        """A server message over the limit reaches the client whole, as the server wrote it
        (too large to parse and upgrade); if it answers a pending request, that request is
        answered: no made-up second answer follows when the server exits."""
        async for piece in line.pieces():
            out.write(piece)
            with contextlib.suppress(ConnectionError):
                await out.drain()
        if not line.tail.endswith(b"\n"):
            out.write(b"\n")
        key = request_key(overlong_id(line))
        if key is not None and self._settle(key) is not None:
            log.info("MCP message of %d bytes over the size limit relayed unparsed", line.size)

    async def _maybe_upgraded(self, line: bytes) -> bytes:
        """The server's line, its responses to noted requests upgraded by the one payload
        rewriter every relay calls (`rewrite_payload`). Every response settles its request,
        upgraded or not: a server that exits later owes it no second answer."""
        if not self.pending or not may_be_response(line):
            return line
        message = parse_message(line)
        answered = _Answered(self, message)
        if not answered:
            return line
        new, _ = await rewrite_payload(line, answered, await self._upgrader(), self.site, message)
        if new is None:
            return line
        return new + (b"\r\n" if line.endswith(b"\r\n") else b"\n")

    async def _answer_pending(self, out: asyncio.StreamWriter | _FileOut) -> None:
        """The server is gone: no request still waiting may be left without an answer. The
        answer is the bridge's, in this relay's mode (docs/mcp.md#a-server-that-exits)."""
        for key, pending in self.pending.drain():
            error = server_gone(self._ids.pop(key, key[1]), pending.method)
            upgrader = await self._upgrader()
            outcome = await upgrader.own_error(error, pending, self.site, Refusal.SERVER_EXITED)
            message = error if outcome is None or outcome.message is None else outcome.message
            out.write((encode(message) or json.dumps(error).encode()) + b"\n")


class _Answered:
    """The noted requests a server message answers, settled as it is read (`Correlates`)."""

    def __init__(self, relay: StdioRelay, message: Any) -> None:
        self._found: dict[int, Pending] = {}
        for item in message if isinstance(message, list) else (message,):
            if isinstance(item, dict) and "method" not in item:
                key = request_key(item.get("id"))
                pending = relay._settle(key) if key is not None else None
                if pending is not None:
                    self._found[id(item)] = pending

    def __bool__(self) -> bool:
        return bool(self._found)

    def pop(self, message: Any) -> Pending | None:
        return self._found.pop(id(message), None)


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
        FlowControlMixin, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    )
    return asyncio.StreamWriter(transport, protocol, None, loop)


def _is_regular_file(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)
