"""The upstream exchange's deadline, and the one place the upstream client's exceptions become
`TransportKind` values. Past this module a transport fault is a value, not an exception.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

import aiohttp

from gateway.failure import TransportKind
from gateway.proxy.client import UpstreamFault


def transport_kind(exc: BaseException) -> TransportKind:
    """Classify an upstream client exception into a `TransportKind`.

    Faults before anything was sent (DNS, connect, TLS) and unparseable answers arrive as
    `UpstreamFault` with their kind; the rest come from aiohttp's protocol and streams once
    the connection was open, so the upstream may have acted on the request.
    """
    if isinstance(exc, UpstreamFault):
        return exc.kind
    if isinstance(exc, aiohttp.SocketTimeoutError | asyncio.TimeoutError | TimeoutError):
        return TransportKind.READ_TIMEOUT
    return TransportKind.RESET


UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


class ResponseDeadline:
    """One deadline for the upstream's response head and, on the failure path, its error body.

    `read_timeout_s` restarts on every byte, so an upstream that drips a byte every few
    hundred milliseconds would hold the request forever. This deadline never restarts: the
    head (and the error body the gateway reads before answering) must have arrived within
    `limits.response_timeout_s`. The clock starts once the request body has been forwarded
    whole, so a slow upload is never mistaken for a slow upstream. A success body is streamed
    to the client as it comes and is bounded by `read_timeout_s` alone, as without a gateway.
    Past the deadline, `async with deadline:` raises `TimeoutError`, which maps to `read_timeout`.
    """

    __slots__ = ("_active", "_seconds", "when")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self.when: float | None = None
        self._active: asyncio.Timeout | None = None

    def start(self) -> None:
        """Start the clock (idempotent): the whole request has been handed to the upstream."""
        if self.when is not None:
            return
        self.when = asyncio.get_running_loop().time() + self._seconds
        if self._active is not None:
            self._active.reschedule(self.when)

    async def __aenter__(self) -> None:
        """Run the block under the deadline, including one started while the block runs.

        A class, not `@asynccontextmanager`: this runs on every request, and the generator
        machinery cost more than the timeout itself.
        """
        self._active = asyncio.timeout_at(self.when)
        await self._active.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        active, self._active = self._active, None
        assert active is not None
        await active.__aexit__(exc_type, exc, tb)  # raises TimeoutError past the deadline
