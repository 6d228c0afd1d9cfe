"""The upstream exchange's deadline, and the one place the upstream client's exceptions become
`TransportKind` values. Past this module a transport fault is a value, not an exception.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

import aiohttp

from gateway.failure import TransportKind
from gateway.proxy.client import UpstreamFault

log = logging.getLogger("mendpoint.upstream")


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
    if isinstance(exc, ssl.SSLError) or isinstance(exc.__cause__, ssl.SSLError):
        # A TLS alert after the handshake: with TLS 1.3 a server refuses a client certificate
        # only once the client has finished, so the refusal arrives as the first read.
        log.warning("TLS with an upstream failed after the handshake: %s", exc.__cause__ or exc)
        return TransportKind.TLS
    return TransportKind.RESET


UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
