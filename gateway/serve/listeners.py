"""Listening sockets: what `[::]` means on every listener the gateway opens.

`listen: "[::]:8080"` reads as "every address", and operators write it to take IPv4 and IPv6
clients alike. asyncio (and uvloop) set `IPV6_V6ONLY` on every IPv6 socket they bind, so
`[::]` took IPv6 clients only: an IPv4 client was refused. For the unspecified IPv6
address the gateway binds the socket itself with `IPV6_V6ONLY` off (dual stack), so IPv4
clients arrive too, as IPv4-mapped peers (`::ffff:10.0.0.1`, see `gateway.config.trust`). Any
other host (`0.0.0.0`, `::1`, a name) is bound as before, by the event loop
(docs/configuration.md#listen-addresses).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from aiohttp import web

_ANY_IPV6 = ipaddress.IPv6Address("::")


def is_any_ipv6(host: str) -> bool:
    """`::`, however written (`::`, `0::0`, `0:0:0:0:0:0:0:0`)."""
    try:
        return ipaddress.ip_address(host) == _ANY_IPV6
    except ValueError:
        return False


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this machine (a name other than localhost is not;
    `0.0.0.0` and `[::]` are every address, so not)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def dual_stack_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket | None:
    """A bound, non-blocking socket on `[::]:port` that takes IPv4 as well; None for any
    other host, which the event loop binds itself. OSError as a bind raises it."""
    if not is_any_ipv6(host):
        return None
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def site(runner: web.BaseRunner, host: str, port: int, **kwargs: Any) -> web.BaseSite:
    """An aiohttp site on `host:port`, dual stack for `[::]` (an admin or resolver listener)."""
    sock = dual_stack_socket(host, port)
    if sock is not None:
        return web.SockSite(runner, sock, **kwargs)
    return web.TCPSite(runner, host, port, reuse_address=True, **kwargs)
