"""Bridge sessions across `serve --workers N`: a session lives in the worker that opened it.

The kernel hands each connection to any worker (SO_REUSEPORT), but a bridge session is a
child process that one worker holds. So every worker also serves the gateway's app on a Unix
socket of its own, in Linux's abstract namespace (no file to clean up, no path-length limit to
meet): `@NS-TAG`, NS being the supervisor's random namespace (`MENDPOINT_BRIDGE_NS`, set for
workers only) and TAG this process's random owner tag. Session ids start with their owner's
tag (`TAG-…`), so a worker that receives a request for a session it does not hold relays the
request, as it came, to the owner's socket and streams the answer back, naming the client's
TCP peer in `X-Mendpoint-Peer` (the owner believes it from a sibling only, `trust.from_sibling`).
The owner serves it like any other request from that peer (origin checks, caller, mode,
upgrades, and the session's holder: another caller's request is a 404 there); a session that
is gone there is a 404 there, never relayed again. A single gateway has no namespace and
relays nothing. The socket is reachable from this host only, like the loopback listener it
stands beside.
"""

from __future__ import annotations

import logging
import os
import secrets

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from gateway.fence.aiohttp_private import SiblingConnector
from gateway.header_names import RELAYED_PEER, REQUEST_ID
from gateway.mcp.rpc_errors import SESSION_NOT_FOUND, rpc_refusal

log = logging.getLogger("mendpoint.mcp")

BRIDGE_NS_ENV = "MENDPOINT_BRIDGE_NS"
OWNER_TAG = secrets.token_hex(4)
"""This process's tag: the first part of every session id it mints."""

# Hop-by-hop and framing headers: the relay frames each leg itself.
_NOT_RELAYED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)


def new_session_id() -> str:
    return f"{OWNER_TAG}-{secrets.token_hex(16)}"


def own_socket() -> str | None:
    """Where this worker serves its siblings; None when this process is not a worker."""
    namespace = os.environ.get(BRIDGE_NS_ENV)
    return None if not namespace else _address(namespace, OWNER_TAG)


def _address(namespace: str, tag: str) -> str:
    return f"\0{namespace}-{tag}"


class Owners:
    """The sibling workers' sockets, and the relay of a request to the one holding a session."""

    def __init__(self, namespace: str | None = None) -> None:
        self.namespace = namespace if namespace is not None else os.environ.get(BRIDGE_NS_ENV)
        self._clients: dict[str, aiohttp.ClientSession] = {}

    def socket_for(self, session_id: str) -> str | None:
        """The socket of the worker that minted `session_id`, if that is another worker."""
        if not self.namespace:
            return None
        tag, dash, _ = session_id.partition("-")
        if not dash or tag == OWNER_TAG or len(tag) != len(OWNER_TAG) or not tag.isalnum():
            return None
        return _address(self.namespace, tag)

    async def relay(
        self, request: web.Request, body: bytes, path: str, request_id: str, peer: str | None
    ) -> web.StreamResponse:
        """The owner's answer to this request from `peer`, streamed back as it comes."""
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in _NOT_RELAYED
        )
        headers[REQUEST_ID] = request_id
        headers[RELAYED_PEER] = peer or ""  # replaces a client's own
        client = self._client(path)
        try:
            upstream = await client.request(
                request.method,
                f"http://gateway{request.raw_path}",
                headers=headers,
                data=body if request.body_exists else None,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("MCP bridge: the worker holding this session cannot be reached: %s", exc)
            return _gone(request_id)
        try:
            answer = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _NOT_RELAYED:
                    answer.headers.add(name, value)
            if upstream.content_length is not None:
                answer.content_length = upstream.content_length
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
            await answer.write_eof()
            return answer
        finally:
            upstream.release()

    def _client(self, path: str) -> aiohttp.ClientSession:
        client = self._clients.get(path)
        if client is None or client.closed:
            client = self._clients[path] = aiohttp.ClientSession(
                connector=SiblingConnector(path=path),
                auto_decompress=False,  # the owner's answer, relayed as it came
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            )
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


def _gone(request_id: str) -> web.Response:
    return rpc_refusal(404, SESSION_NOT_FOUND, "Session not found", request_id)
