"""The admin listener's defence against DNS rebinding: which `Host` it answers without a token.

A page on `evil.example` whose name the attacker rebinds to 127.0.0.1 makes the operator's
browser send requests to a loopback admin listener, and the browser lets that page read the
answers (same origin, as far as it knows). Such a request names the attacker's host in
`Host`. So without an admin token the listener answers only a `Host` that is an IP address,
`localhost`, or a name of `admin_hosts`; with a token the rebound page has none to send, and
the token check refuses it. The probes (/healthz, /readyz) answer any `Host`, as they answer
without a token: a probe may name the Service it reaches, and they say only up and ready
(docs/security.md#dns-rebinding).
"""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import hdrs, web

from gateway.fence.aiohttp_private import Handler, Middleware
from gateway.mcp.origin import host_allowed, not_rebindable

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""What a kubelet probe asks for, and it carries no token: liveness and readiness only."""


def answered_host(host: str | None, names: Collection[str]) -> bool:
    """Whether a request naming `host` cannot be a rebound page's: an IP address or
    `localhost` (the MCP routes' own test, gateway.mcp.origin), one of `names`, or no `Host`
    at all (a browser always sends one)."""
    return host is None or not_rebindable(host.lower()) or host_allowed(host, names)


def refused_host(host: str) -> web.Response:
    text = (
        f"the admin listener answers Host {host!r} only with admin_token_file set: use its IP "
        "address or localhost, or add the name to admin_hosts (docs/security.md#dns-rebinding)\n"
    )
    return web.Response(text=text, status=403)


def rebinding_guard(names: Collection[str]) -> Middleware:
    """For a listener without a token: every admin path but the probes refuses a `Host` that
    is not an address or a configured name (403, saying how to reach it)."""
    allowed = frozenset(n.lower() for n in names)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get(hdrs.HOST)
        if request.path in OPEN_PATHS or answered_host(host, allowed):
            return await handler(request)
        assert host is not None
        return refused_host(host)

    return check
