"""Relaying a Server-Sent Events stream event by event, rewriting only tracked responses.

The stream is cut into events at blank lines as bytes arrive; each event goes out as soon as
its blank line is seen, never the whole stream. An event is forwarded byte for byte unless
its `data:` payload is a JSON-RPC response the rewriter changes; then only the `data:` lines
are replaced (by one line), and its `id:`, `event:`, `retry:` and comment lines stay where
they were. Priming events (an `id:` and an empty `data:`) pass untouched. An event longer than
the cap switches the rest of the stream to plain byte relaying rather than buffering it.
"""

from __future__ import annotations

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
        pending += chunk
        while True:
            end = _event_end(pending)
            if end < 0:
                break
            event, pending = pending[:end], pending[end:]
            await write(await rewrite_event(event, rewrite))
        if len(pending) > max_event_bytes:
            await write(pending)
            pending, raw_mode = b"", True
    if pending:
        await write(pending)


def _event_end(buffer: bytes) -> int:
    """The index just past the first event's terminating blank line, or -1 if incomplete."""
    candidates = [i for i in (buffer.find(b"\n\n"), buffer.find(b"\r\n\r\n")) if i >= 0]
    if not candidates:
        return -1
    first = min(candidates)
    return first + (4 if buffer.startswith(b"\r\n\r\n", first) else 2)


async def rewrite_event(event: bytes, rewrite: RewriteData) -> bytes:
    """One event (with its blank line), its data payload rewritten when `rewrite` says so."""
    newline = b"\r\n" if b"\r\n" in event else b"\n"
    lines = event.split(newline)
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
    for line in lines:
        if not line.startswith(b"data:"):
            out.append(line)
        elif not replaced:
            out.append(b"data: " + new)
            replaced = True
    return newline.join(out)


def _field_value(line: bytes) -> bytes:
    value = line[len(b"data:") :]
    return value[1:] if value.startswith(b" ") else value
