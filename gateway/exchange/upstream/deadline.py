"""The response deadline: one clock for the upstream's head and, on failures, its error body."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import SocketTimeoutError

from gateway.fence.aiohttp_private import ResponseHandler


class ResponseDeadline:
    """One deadline for the upstream's response head and, on the failure path, its error body.

    `read_timeout_s` restarts on every byte, so an upstream that drips a byte every few
    hundred milliseconds would hold the request forever. This deadline never restarts: the
    head (and the error body the gateway reads before answering) must have arrived within
    `limits.response_timeout_s`. The clock starts once the request body has been forwarded
    whole, so a slow upload is never mistaken for a slow upstream. A success body is streamed
    to the client as it comes and is bounded by `read_timeout_s` alone, as without a gateway.

    The client arms it on the connection while it waits for the head: past the deadline the
    wait fails with `SocketTimeoutError` (`read_timeout`). A timer handle, not
    `asyncio.timeout()`: that costs a task lookup and, on Python 3.11, a `getpid()` system
    call per use, on every request.
    """

    __slots__ = ("_expire", "_handle", "_loop", "_seconds", "when")

    def __init__(self, seconds: float, loop: asyncio.AbstractEventLoop) -> None:
        self._seconds = seconds
        self._loop = loop
        self.when: float | None = None
        self._expire: Callable[[], None] | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Start the clock (idempotent): the whole request has been handed to the upstream."""
        if self.when is not None:
            return
        self.when = self._loop.time() + self._seconds
        if self._expire is not None:
            self._handle = self._loop.call_at(self.when, self._expire)

    def arm(self, expire: Callable[[], None]) -> None:
        """Call `expire` at the deadline (or once it is started) until `disarm`."""
        self._expire = expire
        if self.when is not None:
            self._handle = self._loop.call_at(self.when, expire)

    def disarm(self) -> None:
        self._expire = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def expire(protocol: ResponseHandler) -> None:
    """What the deadline does when it passes: the wait for the head fails as a read timeout."""
    protocol.set_exception(SocketTimeoutError("no response within limits.response_timeout_s"))


__all__ = ["ResponseDeadline", "expire"]
