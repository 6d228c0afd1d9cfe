"""OAuth behind the gateway: the protected-resource metadata a server relays names the gateway.

An MCP server that builds its resource URL from `Host` sees the upstream's host, because the
gateway rewrites `Host`. Its protected-resource metadata (RFC 9728) then names the upstream as
the `resource`, and so does the `resource_metadata` URL in its 401's `WWW-Authenticate`; an
OAuth client, which checks that `resource` is the URL it connected to, refuses the server.
A route has two ways out (docs/mcp.md, "OAuth behind the gateway"): `preserve_host: true`, so
the server sees the client's `Host`, or `public_url`, the gateway's URL as clients reach it:
the gateway then rewrites those two URLs, when they name the upstream, to the public URL of
the same path. Nothing else in the document or the header changes (`authorization_servers`
stay as the server wrote them).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from multidict import CIMultiDict

from gateway.exchange.routes import Route

WELL_KNOWN = "/.well-known/oauth-protected-resource"
MAX_METADATA_BYTES = 64 * 1024
_RESOURCE_METADATA = re.compile(r'(resource_metadata\s*=\s*")([^"]*)(")', re.IGNORECASE)


def public(url: str, route: Route) -> str | None:
    """`url` as clients see it when it names the upstream (its host and path); else None."""
    assert route.spec.public_url is not None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.netloc.lower() != route.upstream_host.lower():
        return None
    path = parts.path
    if not path.startswith(route.base_path):
        return None
    path = path[len(route.base_path) :] or "/"
    if route.spec.strip_prefix and route.spec.prefix != "/":
        path = route.spec.prefix.rstrip("/") + path
    query = f"?{parts.query}" if parts.query else ""
    return route.spec.public_url + path + query


def rewrite_challenge(headers: CIMultiDict[str], route: Route) -> None:
    """`resource_metadata="…"` in each `WWW-Authenticate` made public, in place."""
    values = headers.getall("WWW-Authenticate", [])
    if not values:
        return

    def replace(found: re.Match[str]) -> str:
        url = public(found.group(2), route)
        return found.group(0) if url is None else found.group(1) + url + found.group(3)

    headers.popall("WWW-Authenticate")
    for value in values:
        headers.add("WWW-Authenticate", _RESOURCE_METADATA.sub(replace, value))


def is_metadata_request(method: str, path: str) -> bool:
    return method == "GET" and WELL_KNOWN in path


def rewrite_metadata(raw: bytes, route: Route) -> bytes | None:
    """The metadata document with a public `resource`; None when it stays as it came."""
    try:
        document: Any = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("resource"), str):
        return None
    url = public(document["resource"], route)
    if url is None:
        return None
    document["resource"] = url
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
