"""The upstream client and the one place its exceptions become `TransportKind` values.

A single pooled `ClientSession` is shared by every route: no cookie jar, no redirects, no
decompression, no environment proxies, no automatic headers, so what the client sent is what
the upstream gets. Past this module a transport fault is a value, not an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import AsyncIterator

import aiohttp

from gateway.config.models import LimitsSpec
from gateway.failure import TransportKind

SKIPPED_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


def make_session(limits: LimitsSpec) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(
        limit=limits.max_upstream_connections,
        limit_per_host=0,
        ttl_dns_cache=10,
        enable_cleanup_closed=False,
        keepalive_timeout=limits.keepalive_timeout_s,
    )
    session = aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        trust_env=False,
        skip_auto_headers=SKIPPED_AUTO_HEADERS,
        timeout=client_timeout(limits),
        raise_for_status=False,
        max_line_size=limits.max_line_bytes * 2,
        max_field_size=limits.max_header_bytes * 2,
    )
    # aiohttp resends an idempotent request once when the connection drops before the
    # response head; the upstream may already have acted on the first copy, and the gateway
    # promises exactly one upstream request per client request (SPEC §6.3).
    session._retry_connection = False
    return session


def client_timeout(limits: LimitsSpec) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(
        total=limits.total_timeout_s,
        sock_connect=limits.connect_timeout_s,
        connect=limits.connect_timeout_s * 2,
        sock_read=limits.read_timeout_s,
    )


def transport_kind(exc: BaseException) -> TransportKind:
    """Classify a client exception raised before the upstream's response headers arrived.

    Most specific first: DNS and connect faults mean nothing was sent; everything after the
    connection opened may have reached the upstream.
    """
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return TransportKind.DNS_FAILURE
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return TransportKind.CONNECT_TIMEOUT
    if isinstance(exc, aiohttp.ClientConnectorError):
        if exc.os_error.errno in (errno.ETIMEDOUT,):
            return TransportKind.CONNECT_TIMEOUT
        return TransportKind.CONNECT_REFUSED
    if isinstance(exc, aiohttp.SocketTimeoutError | asyncio.TimeoutError | TimeoutError):
        return TransportKind.READ_TIMEOUT
    if isinstance(exc, aiohttp.ClientResponseError):
        return TransportKind.INVALID_RESPONSE
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
    Past the deadline, `scope()` raises `TimeoutError`, which maps to `read_timeout`.
    """

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

    @contextlib.asynccontextmanager
    async def scope(self) -> AsyncIterator[None]:
        """Run the block under the deadline, including one started while the block runs."""
        async with asyncio.timeout_at(self.when) as timeout:
            self._active = timeout
            try:
                yield
            finally:
                self._active = None
