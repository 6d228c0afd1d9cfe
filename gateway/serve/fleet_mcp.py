"""The MCP runtime's part in a fleet: tool annotations told to the other replicas, and the
internal relay port of `fleet.sessions`, where other replicas send the requests of the
bridge sessions this replica holds (docs/mcp.md#across-replicas, docs/mcp.md#replicas).

With a store, what a `tools/list` through this replica teaches its ToolBook is published,
and what the others publish is applied here (gateway.mcp.tool_hints).

The relay port serves the gateway's own app, so a relayed request meets the same route,
checks, caller and mode as at the replica it came through, but every request head must carry
a relay signature made with the fleet's session key within `RELAY_SKEW_S`
(gateway.config.session_keys): anything else is refused with 403 before it is read further,
and the connection closed. So the port is no second way in for whoever can reach it, and
only a replica can name the client whose session it is. Under `serve --workers N` the
workers share the port (SO_REUSEPORT) and a worker that does not hold the session relays it
on to the one that does, as for any request. With the listener, this process also renews
the replica's owner record in the store (gateway.mcp.bridge_replicas) with the address other
replicas reach the port at.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass
from http import HTTPStatus

from aiohttp import web

from gateway.config.fleet_model import WILDCARD_HOSTS
from gateway.config.loaded import LoadedConfig
from gateway.config.model_base import parse_host_port
from gateway.config.session_keys import SessionKeys
from gateway.exchange.connection import GatewayProtocol, head_refusal
from gateway.feedback.shared import SharedTracking
from gateway.fence.aiohttp_private import (
    HeadCheck,
    HttpProcessingError,
    RawRequestMessage,
    server_handler_kwargs,
)
from gateway.mcp.bridge_replicas import ReplicaDirectory
from gateway.mcp.sessions_state import McpRuntime
from gateway.serve.generation import StateHolder
from gateway.serve.listeners import dual_stack_socket

log = logging.getLogger("mendpoint")


class NotRelayed(HttpProcessingError):
    """A request on the relay port that no replica signed."""

    code = HTTPStatus.FORBIDDEN
    message = "Forbidden: this port takes requests relayed by the gateway's replicas only"


def relay_check(keys: SessionKeys) -> HeadCheck:
    """The head test of the relay port: the gateway's own, then a valid relay signature."""

    def check(message: RawRequestMessage) -> tuple[int, HttpProcessingError] | None:
        refused = head_refusal(message)
        if refused is not None:
            return refused
        if keys.signs(message.method, message.path, message.headers, time.time()):
            return None
        return HTTPStatus.FORBIDDEN, NotRelayed()

    return check


@dataclass
class SessionRelay:
    """The relay port's listener and this replica's record in the store."""

    server: asyncio.Server
    directory: ReplicaDirectory
    address: str

    async def close(self) -> None:
        self.server.close()
        await self.directory.close()


async def join_fleet(
    loaded: LoadedConfig,
    server: web.Server,
    state: StateHolder,
    shared: SharedTracking | None,
    runtime: McpRuntime,
    reuse_port: bool,
) -> SessionRelay | None:
    """Share tool annotations through the store; listen on `fleet.sessions.listen` and
    announce it. None without `fleet.sessions`."""
    if shared is not None:
        runtime.tools.on_learned, shared.on_hints = shared.hints, runtime.tools.received
    owners = runtime.bridges.owners
    fleet = loaded.config.fleet
    spec = fleet.sessions if fleet is not None else None
    keys = loaded.session_keys
    if spec is None or shared is None or keys is None:
        return None
    check = relay_check(keys)
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.Protocol:
        return GatewayProtocol(
            server, loop=loop, state=state.exchange, check=check, **server_handler_kwargs(server)
        )

    host, port = parse_host_port(spec.listen)
    dual = dual_stack_socket(host, port, reuse_port=reuse_port)
    if dual is not None:
        listener = await loop.create_server(factory, sock=dual, backlog=1024)
    else:
        listener = await loop.create_server(
            factory, host, port, reuse_address=True, reuse_port=reuse_port, backlog=1024
        )
    bound_port = int(listener.sockets[0].getsockname()[1])
    address = spec.advertise or await _advertised(host, bound_port)
    directory = ReplicaDirectory(shared.store, owners.replica)
    owners.directory = directory
    directory.start(address)
    log.info("bridge session relay listening on %s:%d, announced as %s", host, bound_port, address)
    return SessionRelay(listener, directory, address)


async def _advertised(host: str, port: int) -> str:
    """Where other replicas reach a port bound to `host`: that host, or for a wildcard the
    address this machine's name resolves to (in Kubernetes, the Pod's IP: the kubelet
    writes it for the Pod's hostname in /etc/hosts)."""
    if host not in WILDCARD_HOSTS:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    name = socket.gethostname()
    found = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    address = str(found[0][4][0])
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


__all__ = ["SessionRelay", "join_fleet"]
