"""An MCP request as the gateway reads it: codings undone, JSON-RPC parsed, within bounds.

The gateway forwards the client's bytes untouched; it reads its own copy to note the requests
it must tie responses to. That copy is decoded under the body limit counted on its decoded
size (`limits.max_request_body_bytes`), then parsed only when the bytes say it holds at most
`mcp.max_message_values` JSON values (gateway/text/json_values.py) and, a batch, at most
`mcp.max_batch_messages` messages: past either, the route answers as for a body too large
(413), before a single object is built. A body that is large or content-coded is decoded and
parsed off the event loop, one at a time per process: inflating and parsing megabytes holds
the CPU, and every other request on the loop would wait for it (docs/security.md#mcp-bodies).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from gateway.config.relay_limits import Limited
from gateway.failure import Refusal
from gateway.mcp.jsonrpc import parse_message
from gateway.text.content_codings import Undecodable, decode_content
from gateway.text.json_values import values_at_most

OFF_LOOP_BYTES = 256 << 10
"""A body over this (as sent), or content-coded at all, is read in a thread."""


@dataclass(frozen=True, slots=True)
class Read:
    """The body's JSON-RPC text (codings undone), and its message when it was parsed."""

    body: bytes
    message: Any = None


def too_large(body: bytes, limits: Limited) -> bool:
    """More JSON values than a message may hold: refused unparsed."""
    return not values_at_most(body, limits.max_message_values)


def parse_request(body: bytes, limits: Limited) -> Any | Refusal:
    """The message in `body` (None when it is not JSON), or the refusal of one too large:
    too many values, or a batch of too many messages."""
    if too_large(body, limits):
        return Refusal.BODY_TOO_LARGE
    message = parse_message(body)
    if isinstance(message, list) and len(message) > limits.max_batch_messages:
        return Refusal.BODY_TOO_LARGE
    return message


def read(sent: bytes, coding: str, post: bool, max_bytes: int, limits: Limited) -> Read | Refusal:
    """The whole reading of one body, on whichever thread runs it."""
    decoded = decode_content(sent, coding, max_bytes)
    if decoded is Undecodable.TOO_LARGE:
        return Refusal.BODY_TOO_LARGE
    if isinstance(decoded, Undecodable):
        return Refusal.UNDECODABLE_BODY
    if not post or not decoded:
        return Read(decoded)
    message = parse_request(decoded, limits)
    return message if isinstance(message, Refusal) else Read(decoded, message)


class BodyReader:
    """Reads MCP request bodies for one process: small plain ones at once, the rest in a
    thread, one at a time (the others wait their turn, their bytes already read and
    bounded by the body limit)."""

    def __init__(self) -> None:
        self._turn = asyncio.Semaphore(1)

    async def read(
        self, sent: bytes, coding: str, post: bool, max_bytes: int, limits: Limited
    ) -> Read | Refusal:
        if len(sent) <= OFF_LOOP_BYTES and not coding.strip(", "):
            return read(sent, coding, post, max_bytes, limits)
        async with self._turn:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, read, sent, coding, post, max_bytes, limits)
