"""Trusted proxies: the one list of peers whose forwarding and identity claims are believed.

`trusted_proxies` in the config is a list of CIDR blocks (docs/security.md). A request whose
TCP peer is inside one of them came through a proxy the operator runs (a TLS-terminating
ingress, the auth layer in front), so what that proxy says about the original client is kept:
`Forwarded`, `X-Forwarded-*`, `X-Real-IP`, `True-Client-IP` (gateway.proxy.headers) and, with
`callers.source: trusted_header`, the caller's name and extra scopes (gateway.resolve.callers).
From any other peer those claims are the client's own word and are replaced or ignored.

Only the TCP peer decides: never a header, so a chain of spoofed `X-Forwarded-For` entries
cannot make an untrusted client look trusted.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
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

    def _contains(self, peer: str) -> bool:
        try:
            address = ipaddress.ip_address(peer.partition("%")[0])  # drop an IPv6 zone id
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a dual-stack listener sees ::ffff:10.0.0.1
        return any(address in network for network in self.networks)
