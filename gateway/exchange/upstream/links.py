"""Where a route's requests go and the connections there: the pool key, the connection
record, and opening one (TCP, TLS) with every fault named as a `TransportKind`.

Faults before the response head are raised as `UpstreamFault` carrying the `TransportKind`;
faults while the body is read surface from the payload stream as aiohttp's own errors.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import select
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp import ClientOSError, ServerDisconnectedError
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.config.route_model import TlsSpec
from gateway.config.tls import tls_context
from gateway.exchange.shares import Share
from gateway.failure import TransportKind
from gateway.fence.aiohttp_private import LazyReadTimeoutProtocol
from gateway.telemetry.logs import Throttled

log = logging.getLogger("mendpoint.upstream")

Interim = Callable[[int, str, CIMultiDictProxy[str]], Awaitable[None]]
"""Told of each interim answer passed on to the client: 100 Continue and 103 Early Hints."""


class AttemptWatcher(Protocol):
    """Told of each attempt at one request (a replay is a second one): the exchange's trace
    (gateway.telemetry.spans), which gives each its span and its `traceparent`."""

    def sending(
        self,
        resend_count: int,
        method: str,
        origin: Origin,
        target: str,
        headers: CIMultiDict[str],
    ) -> None: ...

    def failed(self, exc: BaseException) -> None: ...


# How a reused connection dies when the upstream closed it first; timeouts are not among them
# (the upstream may still be working on the request).
CONNECTION_LOST = (ServerDisconnectedError, ClientOSError, ConnectionResetError)
_KEEP_ALIVE_TIMEOUT = re.compile(r"timeout\s*=\s*(\d+)", re.IGNORECASE)


class UpstreamFault(aiohttp.ClientError):
    """The upstream could not be reached or answered with something that is not HTTP."""

    def __init__(self, kind: TransportKind, detail: str) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a route's requests go, and how TLS is spoken there: the pool key. Routes to the
    same upstream with different TLS settings never share a connection."""

    scheme: str
    host: str
    port: int
    tls_spec: TlsSpec | None = None

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def server_name(self) -> str:
        spec = self.tls_spec
        return spec.server_name if spec is not None and spec.server_name else self.host


class UpstreamProtocol(LazyReadTimeoutProtocol):
    """The upstream connection's protocol; it notes whether any byte of an answer arrived
    since the request went out (a failure before that is one a replay may survive)."""

    answered = False

    def data_received(self, data: bytes) -> None:
        self.answered = True
        super().data_received(data)


@dataclass(slots=True, eq=False)
class Link:
    """One upstream connection and the state of the exchange it carries."""

    protocol: UpstreamProtocol
    fd: int  # polled for a close the event loop has not seen yet
    idle_limit: float  # seconds it may stay idle: our limit, or less if the upstream says so
    idle_since: float = 0.0
    reused: bool = False
    after_error: bool = False  # its last answer was a 5xx
    written: bool = False  # a byte of the request went out on it
    sender: asyncio.Task[None] | None = None
    total: asyncio.TimerHandle | None = None
    interim: Interim | None = None  # this exchange's listener for 100 and 103
    go_ahead: asyncio.Future[None] | None = None  # the upstream's 100 Continue, when asked
    share: Share | None = None  # while a request of this route holds it
    stream: bool = False  # carrying a stream: counted against limits.max_upstream_streams
    stream_due: float = 0.0  # when its answer, with no declared end, counts as a stream

    def expired(self, now: float) -> bool:
        return now - self.idle_since >= self.idle_limit


def keep_alive_limit(value: str, limit: float) -> float:
    """The idle time to allow after `Keep-Alive: timeout=N`: a margin below N, at most `limit`.

    The upstream's clock starts when it sent the answer, a little before it arrived here;
    closing a second early (half the time for N < 2) keeps the two from racing.
    """
    match = _KEEP_ALIVE_TIMEOUT.search(value)
    if match is None:
        return limit
    seconds = int(match.group(1))
    return min(limit, max(seconds - 1.0, seconds / 2))


def peer_closed(fd: int) -> bool:
    """Readable while idle: the upstream closed it (or sent bytes nobody asked for).

    The event loop sees a close only on its next turn; a busy loop can hand out a connection
    whose close is already in the kernel. One poll (~0.5 µs) catches that before writing.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class Dialer:
    """Opens connections: TCP within `connect_timeout_s`, TLS with a context per setting."""

    def __init__(self, connect_timeout_s: float, loop: asyncio.AbstractEventLoop) -> None:
        self._timeout = connect_timeout_s
        self._loop = loop
        self._tls_contexts: dict[TlsSpec | None, ssl.SSLContext] = {}

    def tls_context(self, spec: TlsSpec | None) -> ssl.SSLContext:
        """Made on first use: loading the system's CA store takes tens of milliseconds."""
        context = self._tls_contexts.get(spec)
        if context is None:
            context = self._tls_contexts[spec] = tls_context(spec)
        return context

    async def connect(self, origin: Origin) -> UpstreamProtocol:
        loop = self._loop
        # Built before the clock starts: `connect_timeout_s` is the upstream's time to accept
        # and finish its handshake, not the gateway's own reading of its trust store.
        context = self.tls_context(origin.tls_spec) if origin.tls else None
        try:
            async with asyncio.timeout(self._timeout):
                _, protocol = await loop.create_connection(
                    lambda: UpstreamProtocol(loop),
                    origin.host,
                    origin.port,
                    ssl=context,
                    server_hostname=origin.server_name if origin.tls else None,
                )
        except TimeoutError:
            where = f"{origin.host}:{origin.port}"
            raise UpstreamFault(TransportKind.CONNECT_TIMEOUT, where) from None
        except socket.gaierror as exc:
            raise UpstreamFault(TransportKind.DNS_FAILURE, str(exc)) from exc
        except ssl.SSLError as exc:  # before OSError, of which it is one
            problem = tls_problem(exc)
            warn_tls(origin, problem)
            raise UpstreamFault(TransportKind.TLS, problem) from exc
        except (ConnectionResetError, ConnectionAbortedError) as exc:
            if not origin.tls:
                raise UpstreamFault(TransportKind.CONNECT_REFUSED, str(exc)) from exc
            # Accepted, then dropped in the handshake: typically a client certificate that the
            # upstream refused (or none when it requires one).
            problem = f"the upstream closed the connection during the TLS handshake ({exc!r})"
            warn_tls(origin, problem)
            raise UpstreamFault(TransportKind.TLS, problem) from exc
        except OSError as exc:  # refused, unreachable
            kind = TransportKind.CONNECT_REFUSED
            if exc.errno == errno.ETIMEDOUT:
                kind = TransportKind.CONNECT_TIMEOUT
            raise UpstreamFault(kind, str(exc)) from exc
        return protocol


def tls_problem(exc: ssl.SSLError) -> str:
    """What was wrong, in OpenSSL's words: "self-signed certificate", "Hostname mismatch…"."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    return str(exc.reason or exc)


TLS_WARNINGS = Throttled(log)


def warn_tls(origin: Origin, problem: str) -> None:
    TLS_WARNINGS.warning(
        f"{origin.host}:{origin.port} {problem}",
        "TLS with upstream %s:%d (server name %s) failed: %s",
        origin.host,
        origin.port,
        origin.server_name,
        problem,
    )


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


__all__ = [
    "CONNECTION_LOST",
    "UPSTREAM_ERRORS",
    "Dialer",
    "Interim",
    "Link",
    "Origin",
    "UpstreamFault",
    "UpstreamProtocol",
    "keep_alive_limit",
    "peer_closed",
    "transport_kind",
]
