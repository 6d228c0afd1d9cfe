"""Relaying a Server-Sent Events stream event by event, rewriting only tracked responses.

The stream is cut into events at blank lines as bytes arrive; each event goes out as soon as
its blank line is seen, never the whole stream. An event is forwarded byte for byte unless
its `data:` payload is a JSON-RPC response the rewriter changes; then only the `data:` lines
are replaced (by one line), and its `id:`, `event:`, `retry:` and comment lines stay where
they were. Priming events (an `id:` and an empty `data:`) pass untouched. An event longer than
the cap switches the rest of the stream to plain byte relaying rather than buffering it.
Lines may end in CRLF, LF or a lone CR, mixed within one event, as the SSE grammar allows;
each keeps its own ending. Only the bytes not yet scanned are searched for an event's end, so
a huge event costs linear time.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, Awaitable, Callable

RewriteData = Callable[[bytes], Awaitable[bytes | None]]
Write = Callable[[bytes], Awaitable[None]]


async def relay_events(
    chunks: AsyncIterable[bytes], write: Write, rewrite: RewriteData, max_event_bytes: int
) -> None:
    """Copy `chunks` to `write`, passing each complete event's data through `rewrite`."""
    pending = b""
    raw_mode = False
    async for chunk in chunks:
        if raw_mode:
            await write(chunk)
            continue
        scan_from = max(0, len(pending) - 3)  # a blank line may straddle the chunks
        pending += chunk
        while (end := _event_end(pending, scan_from)) >= 0:
            event, pending = pending[:end], pending[end:]
            scan_from = 0
            await write(await rewrite_event(event, rewrite))
        if len(pending) > max_event_bytes:
            await write(pending)
            pending, raw_mode = b"", True
    if pending:
        await write(pending)


# A line ends in CRLF, LF or CR (a CR directly before an LF is half of a CRLF, never alone).
_LINE_END = rb"\r\n|\r(?!\n)|\n"
_LINE_ENDS = re.compile(b"(" + _LINE_END + b")")
_BLANK_LINE = re.compile(b"(?:" + _LINE_END + b"){2}")


def _event_end(buffer: bytes, start: int = 0) -> int:
    """The index just past the first event's terminating blank line, or -1 if incomplete."""
    found = _BLANK_LINE.search(buffer, start)
    return -1 if found is None else found.end()


async def rewrite_event(event: bytes, rewrite: RewriteData) -> bytes:
    """One event (with its blank line), its data payload rewritten when `rewrite` says so."""
    parts = _LINE_ENDS.split(event)
    lines, ends = parts[0::2], [*parts[1::2], b""]
    data = [line for line in lines if line.startswith(b"data:")]
    if not data:
        return event
    payload = b"\n".join(_field_value(line) for line in data)
    if not payload.strip():
        return event
    new = await rewrite(payload)
    if new is None:
        return event
    out: list[bytes] = []
    replaced = False
    for line, end in zip(lines, ends, strict=True):
        if not line.startswith(b"data:"):
            out.append(line + end)
        elif not replaced:
            out.append(b"data: " + new + end)
            replaced = True
    return b"".join(out)


def _field_value(line: bytes) -> bytes:
    value = line[len(b"data:") :]
    return value[1:] if value.startswith(b" ") else value
