"""Newline-delimited JSON-RPC read line by line, with lines over the size limit streamed.

A line up to `limit` bytes comes back whole, to be parsed. A longer one is never buffered and
never cut: it comes back as an `Overlong` whose pieces the caller passes on (stdio relays them
to the other side whole) or drops (the bridge answers its request with an error instead). Its
first and last bytes are kept, because a relay must still tie the message to the request it
answers: SDKs write the `id` either first (`{"jsonrpc":"2.0","id":7,…`) or last
(`…,"jsonrpc":"2.0","id":7}`), and `overlong_id` finds it there, top level only.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

EDGE_BYTES = 4096
_ID = rb'(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}")'
_HEAD_ID = re.compile(rb'^\s*\{(?:\s*"jsonrpc"\s*:\s*"2\.0"\s*,)?\s*"id"\s*:\s*' + _ID)
_TAIL_ID = re.compile(rb'"id"\s*:\s*' + _ID + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$')


@dataclass
class Overlong:
    """A line longer than the limit: its pieces, read on demand, and its size so far."""

    reader: asyncio.StreamReader
    first: bytes
    size: int = 0
    head: bytes = b""
    tail: bytes = b""
    _done: bool = field(default=False, repr=False)

    async def pieces(self) -> AsyncIterator[bytes]:
        """Every byte of the line, the newline included (if the stream had one), in pieces."""
        piece: bytes | None = self.first
        while piece is not None:
            self._note(piece)
            yield piece
            piece = None if self._done else await self._next()

    async def drain(self) -> None:
        """Read the rest of the line, keeping only its edges."""
        async for _ in self.pieces():
            pass

    async def _next(self) -> bytes | None:
        try:
            piece = await self.reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as exc:
            return await self.reader.read(max(exc.consumed, 1))
        except asyncio.IncompleteReadError as exc:
            piece = exc.partial
        self._done = True
        return piece or None

    def _note(self, piece: bytes) -> None:
        if self.size < EDGE_BYTES:
            self.head = (self.head + piece)[:EDGE_BYTES]
        self.size += len(piece)
        self.tail = (self.tail + piece)[-EDGE_BYTES:]


async def read_line(reader: asyncio.StreamReader) -> bytes | Overlong:
    """The next line (b"" at end of input; the last line may lack its newline), or an
    `Overlong` when it passes the reader's limit."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial
    except asyncio.LimitOverrunError as exc:
        return Overlong(reader, await reader.read(max(exc.consumed, 1)))


def overlong_id(line: Overlong) -> Any:
    """The top-level `id` of an over-long message, from its edges; None when not found."""
    found = _HEAD_ID.match(line.head) or _TAIL_ID.search(line.tail)
    if found is None:
        return None
    raw = found.group(1)
    if not raw.startswith(b'"'):
        return int(raw)
    try:
        return json.loads(raw)
    except ValueError:
        return None
