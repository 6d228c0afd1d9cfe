"""Who a bridge session belongs to (docs/mcp.md#sessions-belong-to-their-caller).

A bridge session is a child process that runs tools on the caller's behalf, so only the caller
that opened it may use or end it: a leaked `Mcp-Session-Id` (a log, a shared proxy, a trace)
must not hand the session to someone else. The holder is the caller's name when the request
has one (`callers`: an API key, or a trusted auth layer's header), else the anonymous client's
address: the TCP peer, or, from a trusted proxy, the client it names in `X-Forwarded-For`
(`TrustedProxies.client_address`). An IPv6 client counts by its /64, the block one host or
one site is given, since a client can pick any address inside it and would otherwise escape
the per-caller session limit. Clients behind one NAT (or one untrusted proxy) share an
address, and so share their sessions' holder and their limit: the session id, 128 random
bits, still keeps their sessions apart, and callers that need their own limit use API keys.

The holder also counts sessions against its share of the route (`max_sessions_per_caller` for a
named caller, `max_sessions_per_address` for an address: gateway.config.route_model).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

from gateway.resolve.callers import Caller

IPV6_GROUP_PREFIX = 64


@dataclass(frozen=True, slots=True)
class Holder:
    """A named caller, or an anonymous client address (a /64 for IPv6)."""

    kind: Literal["caller", "address"]
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


def holder_of(caller: Caller, client_address: str | None) -> Holder:
    """The holder of the sessions a request opens or may use."""
    if caller.name is not None:
        return Holder("caller", caller.name)
    return Holder("address", _address_group(client_address or ""))


def _address_group(address: str) -> str:
    try:
        parsed = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return address  # not an IP (a Unix socket's empty peer): one group of its own
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, IPV6_GROUP_PREFIX), strict=False))
    return str(parsed)


__all__ = ["Holder", "holder_of"]
