"""Bridge sessions across processes: a session lives in the process that opened it, and any
other relays its requests there (docs/mcp.md#workers, docs/mcp.md#replicas).

Under `serve --workers N` the kernel hands each connection to any worker (SO_REUSEPORT), but
a bridge session is a child process that one worker holds. So every worker also serves the
gateway's app on a Unix socket of its own, in Linux's abstract namespace (no file to clean
up, no path-length limit to meet): `@NS-TAG`, NS being the supervisor's random namespace
(`MENDPOINT_BRIDGE_NS`, set for workers only) and TAG this process's random owner tag.
Session ids name their owner's tag, so a worker that receives a request for a session it
does not hold relays the request, as it came, to the owner's socket and streams the answer
back, naming the client's TCP peer in `X-Mendpoint-Peer` (the owner believes it from a
sibling only, `trust.from_sibling`). The owner serves it like any other request from that
peer (origin checks, caller, mode, upgrades, and the session's holder: another caller's
request is a 404 there); a session that is gone there is a 404 there, never relayed again.

With `fleet.sessions`, ids also name the replica (`REPLICA-TAG-SECRET-MAC`, the MAC under the
fleet's session key, gateway.config.session_keys), and a request for another replica's
session is relayed the same way to that replica's internal port, found in the fleet store
(`bridge_replicas`) and signed; whichever of its workers takes it relays it on to the owner
as a sibling would. A relayed request is never relayed to a third replica. An id that does
not verify, an owner with no live record, one that cannot be reached, and one that goes away
while the relay waits are each a 404: the client starts a new session. Without
`fleet.sessions` ids are `TAG-SECRET` and nothing leaves the replica.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from gateway.config.session_keys import SessionKeys, relay_fields
from gateway.fence.aiohttp_private import SiblingConnector
from gateway.header_names import RELAY_SIGNATURE, RELAYED_PEER, REQUEST_ID
from gateway.mcp.bridge_replicas import HEARTBEAT_S, ReplicaDirectory
from gateway.mcp.rpc_errors import SESSION_NOT_FOUND, rpc_refusal

log = logging.getLogger("mendpoint.mcp")

BRIDGE_NS_ENV = "MENDPOINT_BRIDGE_NS"
OWNER_TAG = secrets.token_hex(4)
"""This process's tag: the worker part of every session id it mints."""
TAG_CHARS = len(OWNER_TAG)
SECRET_CHARS = 32
MAC_CHARS = 32
RELAY_CONNECT_S = 2.0
"""A replica that does not accept a connection within this is taken for gone (404)."""

# Hop-by-hop and framing headers: the relay frames each leg itself; a relay signature is
# made for its own leg only.
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
        RELAY_SIGNATURE.lower(),
    }
)
Alive = Callable[[], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Owner:
    """The process a session id names: its replica (None in an unsigned id) and worker tag."""

    replica: str | None
    worker: str


def own_socket() -> str | None:
    """Where this worker serves its siblings; None when this process is not a worker."""
    namespace = os.environ.get(BRIDGE_NS_ENV)
    return None if not namespace else _address(namespace, OWNER_TAG)


def _address(namespace: str, tag: str) -> str:
    return f"\0{namespace}-{tag}"


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdef" for c in text)


class Owners:
    """Who holds a session this process does not, and the relay of a request to it."""

    def __init__(self, keys: SessionKeys | None = None, namespace: str | None = None) -> None:
        self.namespace = namespace if namespace is not None else os.environ.get(BRIDGE_NS_ENV)
        self.keys = keys
        self.replica = (
            hashlib.sha256(self.namespace.encode()).hexdigest()[:TAG_CHARS]
            if self.namespace
            else OWNER_TAG
        )
        """This replica's tag: its supervisor's (every worker's the same), or this process's."""
        self.directory: ReplicaDirectory | None = None
        """The other replicas' relay ports, with `fleet.sessions` and a store."""
        self._clients: dict[str, aiohttp.ClientSession] = {}
        self._closing: set[asyncio.Task[None]] = set()
        """Clients of siblings found gone, closing: kept (a task with no reference may be
        collected before it runs) and awaited by `close`."""
        self._replica_client: aiohttp.ClientSession | None = None

    def new_session_id(self) -> str:
        secret = secrets.token_hex(SECRET_CHARS // 2)
        if self.keys is None:
            return f"{OWNER_TAG}-{secret}"
        body = f"{self.replica}-{OWNER_TAG}-{secret}"
        return f"{body}-{self.keys.sign_id(body)}"

    def owner_of(self, session_id: str) -> Owner | None:
        """The owner an id names; None for one this gateway did not make (a signed id whose
        MAC does not verify, or any other shape)."""
        parts = session_id.split("-")
        if self.keys is None:
            if len(parts) != 2 or not _is_hex(parts[0], TAG_CHARS):
                return None
            return Owner(None, parts[0])
        if len(parts) != 4:
            return None
        replica, worker, secret, mac = parts
        if not (
            _is_hex(replica, TAG_CHARS)
            and _is_hex(worker, TAG_CHARS)
            and _is_hex(secret, SECRET_CHARS)
            and _is_hex(mac, MAC_CHARS)
        ):
            return None
        if not self.keys.id_valid(session_id.rpartition("-")[0], mac):
            return None
        return Owner(replica, worker)

    async def answer(
        self,
        request: web.Request,
        body: bytes,
        session_id: str,
        request_id: str,
        peer: str | None,
        from_replica: bool,
    ) -> web.StreamResponse:
        """The owner's answer to a request for a session this process does not hold, or 404.
        `from_replica`: another replica relayed it here, so it goes no further than a
        sibling worker."""
        owner = self.owner_of(session_id)
        if owner is None or owner.worker == OWNER_TAG:
            return _gone(request_id)
        headers = _relayed_headers(request, request_id, peer)
        if owner.replica is None or owner.replica == self.replica:
            if not self.namespace:
                return _gone(request_id)
            path = _address(self.namespace, owner.worker)
            url = URL(f"http://gateway{request.raw_path}", encoded=True)
            return await self._relay(request, body, self._sibling(path), url, headers, request_id)
        directory = self.directory
        if from_replica or directory is None or self.keys is None:
            return _gone(request_id)
        address = await directory.address_of(owner.replica)
        if address is None:
            return _gone(request_id)
        fields = relay_fields(request.method, request.raw_path, headers)
        headers[RELAY_SIGNATURE] = self.keys.sign_relay(fields, time.time())
        url = URL(f"http://{address}{request.raw_path}", encoded=True)
        replica = owner.replica
        return await self._relay(
            request,
            body,
            self._to_replicas(),
            url,
            headers,
            request_id,
            lambda: directory.alive(replica),
        )

    async def _relay(
        self,
        request: web.Request,
        body: bytes,
        client: aiohttp.ClientSession,
        url: URL,
        headers: CIMultiDict[str],
        request_id: str,
        alive: Alive | None = None,
    ) -> web.StreamResponse:
        """The owner's answer, streamed back as it comes; 404 when the owner cannot be reached
        or (`alive`) goes away before it answers."""
        sending = asyncio.ensure_future(
            client.request(
                request.method,
                url,
                headers=headers,
                data=body if request.body_exists else None,
                allow_redirects=False,
            )
        )
        try:
            upstream = await _answered(sending, alive)
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("MCP bridge: the process holding this session cannot be reached: %s", exc)
            self._forget(client)
            return _gone(request_id)
        finally:
            sending.cancel()  # a no-op once it is done
        if upstream is None:
            log.warning("MCP bridge: the replica holding this session went away: 404")
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

    def _sibling(self, path: str) -> aiohttp.ClientSession:
        client = self._clients.get(path)
        if client is None or client.closed:
            client = self._clients[path] = _client(SiblingConnector(path=path))
        return client

    def _to_replicas(self) -> aiohttp.ClientSession:
        client = self._replica_client
        if client is None or client.closed:
            # No cap of its own: each relayed request holds a client connection, capped.
            client = self._replica_client = _client(aiohttp.TCPConnector(limit=0))
        return client

    def _forget(self, client: aiohttp.ClientSession) -> None:
        """A sibling socket nobody listens on (an id of a worker gone, or made up) is not
        kept: the table holds live siblings only."""
        for path, known in list(self._clients.items()):
            if known is client:
                del self._clients[path]
                closing = asyncio.get_running_loop().create_task(client.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        for client in [*self._clients.values(), self._replica_client]:
            if client is not None:
                await client.close()
        self._clients.clear()
        self._replica_client = None


async def _answered(
    sending: asyncio.Future[aiohttp.ClientResponse], alive: Alive | None
) -> aiohttp.ClientResponse | None:
    """The owner's response head; None when `alive` says the owner is gone before it came."""
    if alive is None:
        return await sending
    while True:
        done, _ = await asyncio.wait({sending}, timeout=HEARTBEAT_S)
        if done:
            return sending.result()
        if not await alive():
            return None


def _relayed_headers(request: web.Request, request_id: str, peer: str | None) -> CIMultiDict[str]:
    headers = CIMultiDict(
        (k, v) for k, v in request.headers.items() if k.lower() not in _NOT_RELAYED
    )
    headers[REQUEST_ID] = request_id
    headers[RELAYED_PEER] = peer or ""  # replaces a client's own
    return headers


def _client(connector: aiohttp.BaseConnector) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,  # the owner's answer, relayed as it came
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=RELAY_CONNECT_S),
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
    )


def _gone(request_id: str) -> web.Response:
    return rpc_refusal(404, SESSION_NOT_FOUND, "Session not found", request_id)
