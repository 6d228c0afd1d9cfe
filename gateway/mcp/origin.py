"""The DNS-rebinding defence of an MCP route: which `Origin` and `Host` values are let in.

The gateway rewrites `Host` to the upstream's, so the server behind it can no longer tell a
rebound browser request from a real one; the gateway checks instead (MCP transport spec:
servers MUST validate `Origin`). No `Origin` (a non-browser client) is allowed; an `Origin`
is allowed when it is listed, or, with no list, when it names the host the request came to
and that host is `localhost` or an IP address. A page on a DNS name that resolves to the
gateway (DNS rebinding) has an `Origin` equal to its `Host`, so a same-origin name proves
nothing; such origins must be listed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection

from gateway.config.route_model import RouteSpec


def refusal(origin: str | None, host: str | None, spec: RouteSpec) -> str | None:
    """Why the request is refused (answer 403), or None when it may pass."""
    if spec.allowed_hosts is not None and not host_allowed(host or "", spec.allowed_hosts):
        return "Host not allowed for this MCP endpoint"
    if origin is not None and not origin_allowed(origin, host, spec.allowed_origins):
        return "Origin not allowed for this MCP endpoint"
    return None


def origin_allowed(origin: str, host: str | None, allowed: list[str] | None) -> bool:
    wanted = origin.strip().rstrip("/").lower()
    if allowed is None:
        netloc = wanted.partition("://")[2]
        return bool(host) and netloc == (host or "").lower() and not_rebindable(netloc)
    return "*" in allowed or wanted in {a.rstrip("/").lower() for a in allowed}


def host_allowed(host: str, allowed: Collection[str]) -> bool:
    """`host:port` matches an entry naming it exactly, or naming the host with no port."""
    host = host.strip().lower()
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    entries = {a.lower() for a in allowed}
    return host in entries or name in entries


def not_rebindable(netloc: str) -> bool:
    """`localhost` or an IP literal: names no attacker's DNS can point at the gateway (the
    admin listener's check too: gateway.serve.admin_guard)."""
    bracketed = netloc.startswith("[")
    name = netloc[1:].partition("]")[0] if bracketed else netloc.rsplit(":", 1)[0]
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
