"""Streaming bodies through the gateway without buffering them.

`RequestBody` relays the client's body to the upstream chunk by chunk under a size cap and a
per-chunk stall timeout, and remembers why it stopped so the handler can answer 413 or 408
instead of blaming the upstream. Error bodies are read with `gateway.text.capped_read.read_capped`.
Undoing a body's content codings is gateway/text/content_codings.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import StreamReader


class BodyTooLarge(Exception):
    """The client's body passed `limits.max_request_body_bytes`."""


class BodyStalled(Exception):
    """The client stopped sending its body for longer than `request_body_timeout_s`."""


class RequestBody:
    """The client's body as an async iterable of chunks, replayable while it stays small.

    Up to `keep_bytes` of it are kept as they pass, so that when a reused upstream connection
    turns out to be dead before any answer the upstream client can send the same bytes again
    on a fresh one (`replayable`). A second iteration yields the kept chunks, then reads on
    from the client where the first stopped. Over `keep_bytes` nothing is kept: a large body
    is streamed once and never replayed.
    """

    def __init__(
        self,
        stream: StreamReader,
        max_bytes: int,
        stall_timeout_s: float,
        on_end: Callable[[], None] | None = None,
        digest: Any = None,
        keep_bytes: int = 0,
    ) -> None:
        self._stream = stream
        self._max_bytes = max_bytes
        self._stall_timeout_s = stall_timeout_s
        self.on_end = on_end
        """Called once the body has been read whole (the response deadline starts then)."""
        self._digest = digest  # a hashlib object fed every chunk (follow-up tracking)
        self._keep_bytes = keep_bytes
        self._kept: list[bytes] | None = [] if keep_bytes > 0 else None
        self._total = 0
        self._ended = False
        self.failure: BodyTooLarge | BodyStalled | None = None

    @property
    def replayable(self) -> bool:
        """Every byte taken from the client so far is kept, and the client's body is sound."""
        return self._kept is not None and self.failure is None

    @property
    def untouched(self) -> bool:
        """Not a byte of the body was read from the client."""
        return self._total == 0 and not self._ended

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.chunks()

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in tuple(self._kept or ()):  # a replay: what an earlier attempt took
            yield chunk
        while not self._ended:
            try:
                async with asyncio.timeout(self._stall_timeout_s):
                    chunk = await self._stream.readany()
            except TimeoutError:
                self.failure = BodyStalled()
                raise self.failure from None
            if not chunk:
                self._ended = True
                if self.on_end is not None:
                    self.on_end()
                return
            if self._digest is not None:
                self._digest.update(chunk)
            self._total += len(chunk)
            if self._total > self._max_bytes:
                self.failure = BodyTooLarge()
                raise self.failure
            if self._kept is not None:
                if self._total <= self._keep_bytes:
                    self._kept.append(chunk)
                else:
                    self._kept = None
            yield chunk
