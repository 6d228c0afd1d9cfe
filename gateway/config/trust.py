"""Trusted proxies: the one list of peers whose forwarding and identity claims are believed.

`trusted_proxies` in the config is a list of CIDR blocks (docs/security.md). A request whose
TCP peer is inside one of them came through a proxy the operator runs (a TLS-terminating
ingress, the auth layer in front), so what that proxy says about the original client is kept:
`Forwarded`, `X-Forwarded-*`, `X-Real-IP`, `True-Client-IP` (gateway.exchange.headers) and, with
`callers.source: trusted_header`, the caller's name and extra scopes (gateway.resolve.callers).
From any other peer those claims are the client's own word and are replaced or ignored.

Only the TCP peer decides: never a header, so a chain of spoofed `X-Forwarded-For` entries
cannot make an untrusted client look trusted. Behind a trusted proxy, the original client is
the last `X-Forwarded-For` entry that proxy (or another trusted one) appended
(`client_address`): entries to its left are the client's own claims.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Distinct peers remembered with their verdict; peers repeat (keep-alive, a few proxies), so
# the success path pays one dict lookup instead of parsing the address on every request.
MAX_REMEMBERED_PEERS = 4096


def parse_network(text: str) -> Network:
    """`10.0.0.0/8`, `2001:db8::/32`, or a single address (a /32 or /128).

    Host bits must be zero: `10.0.0.1/8` is refused rather than silently widened, since an
    operator who wrote it may have meant the single address.
    """
    value = text.strip()
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        if "has host bits set" in str(exc):
            wide = ipaddress.ip_network(value, strict=False)
            raise ValueError(
                f"{value!r} has host bits set; write {wide} for the whole block, or the "
                f"address alone for one host"
            ) from None
        raise ValueError(
            f"{value!r} is not an IP network (write a CIDR block such as 10.0.0.0/8, "
            f"or one address such as 127.0.0.1)"
        ) from None


@dataclass(frozen=True, slots=True)
class TrustedProxies:
    """Answers "did this TCP peer come from a trusted proxy?" for the data path."""

    networks: tuple[Network, ...] = ()
    _verdicts: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, blocks: Iterable[str]) -> TrustedProxies:
        return cls(tuple(parse_network(block) for block in blocks))

    def trusts(self, peer: str | None) -> bool:
        """True when `peer` (an address as `request.remote` gives it) is inside the list."""
        if not self.networks or not peer:
            return False
        verdict = self._verdicts.get(peer)
        if verdict is None:
            verdict = self._contains(peer)
            if len(self._verdicts) >= MAX_REMEMBERED_PEERS:
                self._verdicts.clear()
            self._verdicts[peer] = verdict
        return verdict

    def client_address(self, peer: str | None, forwarded_for: Sequence[str]) -> str | None:
        """The original client's address: the TCP peer, or, from a trusted peer, the last
        `X-Forwarded-For` entry (`forwarded_for`: every field value) that is not itself a
        trusted proxy, walking right to left as each trusted hop appended.

        Only a trusted hop's entry is believed: a client may prepend anything, but the proxy
        it reached appends the address it saw. An entry that is not an address ends the walk
        at the hop before it (the clients behind it then share that hop's address, never an
        address of their choosing); when every entry is trusted, the leftmost is the client.
        """
        if not self.trusts(peer):
            return peer
        client = peer
        entries = [e.strip() for value in forwarded_for for e in value.split(",")]
        for entry in reversed([e for e in entries if e]):
            address = _address_of(entry)
            if address is None:
                break
            client = str(address)
            if not self.trusts(client):
                break
        return client

    def _contains(self, peer: str) -> bool:
        address = _address_of(peer)
        return address is not None and any(address in network for network in self.networks)


def from_sibling(transport: asyncio.BaseTransport | None) -> bool:
    """The connection is a Unix socket whose other end runs as this process's user: a sibling
    worker relaying a bridge request (`serve --workers`), whose word on the client's peer is
    believed. An abstract-namespace socket has no file permissions, so any local process may
    connect to it; the kernel's SO_PEERCRED says who did, and only the gateway's own user (who
    could read the workers' memory anyway) may name a peer."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    option = getattr(socket, "SO_PEERCRED", None)  # Linux, like `serve --workers`
    if sock is None or option is None or sock.family != socket.AF_UNIX:
        return False
    try:
        credentials = sock.getsockopt(socket.SOL_SOCKET, option, _UCRED.size)
    except OSError:
        return False
    _, uid, _ = _UCRED.unpack(credentials)
    return bool(uid == os.getuid())


_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _address_of(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address as a peer or an `X-Forwarded-For` entry gives it (`[v6]:port` and
    `v4:port` forms too), an IPv4-mapped IPv6 one as IPv4; None when it is not one."""
    value = text.strip()
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]  # 192.0.2.1:4711
    try:
        address = ipaddress.ip_address(value.partition("%")[0])  # drop an IPv6 zone id
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # a dual-stack listener sees ::ffff:10.0.0.1
    return address


def unmapped_peer(peer: str | None) -> str | None:
    """The TCP peer as the client's own address: an IPv4 client of a dual-stack listener
    arrives as `::ffff:10.0.0.1` and is named `10.0.0.1`, as an IPv4 listener names it, so
    what the upstream reads in `X-Forwarded-For` does not depend on how `listen` is written."""
    if peer is not None and peer.startswith("::ffff:") and "." in peer:
        return peer[7:]
    return peer
