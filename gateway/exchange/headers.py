"""Header hygiene between client, gateway and upstream (RFC 9110 §7.6).

Hop-by-hop headers, and any header the sender names in `Connection`, describe one
connection and must not cross the proxy in either direction. The forwarding headers tell the
upstream who really called. From a trusted proxy (`trusted_proxies`, gateway.config.trust) they are
kept and appended to: `X-Forwarded-For` gains the peer, `Forwarded` gains this hop's element,
and the others pass as the proxy set them. From anyone else they are the client's own claims:
`X-Forwarded-For` is appended to, `X-Forwarded-Host`/`-Proto` and `Forwarded` are replaced,
and the rest (`TRUSTED_ONLY`: other client-address claims such as `X-Real-IP` or
`CF-Connecting-IP`, `X-Forwarded-Port`/`-Prefix`, and URL overrides such as
`X-Original-URL`) are dropped (docs/security.md).
"""

from __future__ import annotations

import re

from multidict import CIMultiDict, CIMultiDictProxy

from gateway.header_names import OWN_HEADERS, REQUEST_ID

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "http2-settings",
    }
)
VIA = "1.1 mendpoint"
REPLACED_ON_REQUEST = frozenset(
    {"host", "x-forwarded-host", "x-forwarded-proto", "forwarded", REQUEST_ID.lower()}
)
# Claims about the original client and its request that only a trusted proxy may make and
# the gateway does not set itself: passed from a trusted proxy, dropped from anyone else
# (docs/security.md#forwarding-headers).
CLIENT_ADDRESS_CLAIMS = frozenset(
    {
        # Read by client-address resolvers (request-ip for Node, and the like) before, or
        # instead of, X-Forwarded-For: a client that sets one picks its own address.
        "x-real-ip",
        "true-client-ip",
        "x-client-ip",
        "cf-connecting-ip",
        "fastly-client-ip",
        "x-cluster-client-ip",
        "x-appengine-user-ip",
        "cf-pseudo-ipv4",
        "x-forwarded",
        "forwarded-for",
        "x-original-forwarded-for",
    }
)
CONNECTION_CLAIMS = frozenset(
    {
        "x-forwarded-port",
        "x-forwarded-prefix",
        "x-forwarded-server",
        "x-forwarded-scheme",  # Rack's scheme, beside X-Forwarded-Proto
        "x-forwarded-ssl",  # Rack: `on` makes the request https
    }
)
# The URL the client "really" asked for, which the application then routes on in place of
# the request line: Symfony and Laravel before 2018 (CVE-2018-14773), Zend, IIS URL Rewrite
# (X-Original-URL, X-Rewrite-URL), nginx's auth_request convention and forward-auth servers
# (X-Original-URI, X-Forwarded-Uri, X-Forwarded-Method). From a client they reach a path the
# route table never allowed.
REQUEST_OVERRIDE_CLAIMS = frozenset(
    {"x-original-url", "x-rewrite-url", "x-original-uri", "x-forwarded-uri", "x-forwarded-method"}
)
TRUSTED_ONLY = CLIENT_ADDRESS_CLAIMS | CONNECTION_CLAIMS | REQUEST_OVERRIDE_CLAIMS
# Underscore policy. CGI, WSGI, PHP and Rack read both `X-Forwarded-For` and `X_Forwarded_For`
# as HTTP_X_FORWARDED_FOR, so an underscore spelling of a header the gateway sets or strips
# could override what the gateway vouches for. Those spellings are dropped; any other header
# with an underscore is forwarded as sent (nginx would drop them all, which breaks APIs that
# use such names).
MANAGED_ON_REQUEST = (
    HOP_BY_HOP | REPLACED_ON_REQUEST | TRUSTED_ONLY | {"x-forwarded-for", "via", "content-length"}
)


def visible_ascii(value: str) -> bool:
    """Only 0x21-0x7E (a token-like id); three C-level checks instead of one per character."""
    return value.isascii() and value.isprintable() and " " not in value


def connection_named(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> frozenset[str]:
    """Lower-cased header names listed in every `Connection` header."""
    names: set[str] = set()
    for value in headers.getall("Connection", ()):
        names.update(token.strip().lower() for token in value.split(",") if token.strip())
    return frozenset(names)


# Precomputed once: the success path filters every header of every request against these.
GATEWAY_OWN = frozenset(name.lower() for name in OWN_HEADERS)
DROPPED_ON_REQUEST = HOP_BY_HOP | REPLACED_ON_REQUEST | TRUSTED_ONLY | GATEWAY_OWN
# From a trusted proxy only what describes this hop is replaced; its forwarding headers stay.
DROPPED_FROM_TRUSTED = HOP_BY_HOP | GATEWAY_OWN | {"host", REQUEST_ID.lower()}


# `Connection` values that name no other header; nearly every message carries one of these.
_PLAIN_CONNECTION = frozenset({"keep-alive", "close", "Keep-Alive", "Close"})


def _end_to_end(
    headers: CIMultiDictProxy[str] | CIMultiDict[str], drop: frozenset[str] = HOP_BY_HOP
) -> CIMultiDict[str]:
    named = headers.getall("Connection", ())
    if named and not (len(named) == 1 and named[0] in _PLAIN_CONNECTION):
        drop = drop | connection_named(headers)
    return CIMultiDict([(k, v) for k, v in headers.items() if k.lower() not in drop])


def _is_spoof(name: str) -> bool:
    """An underscore spelling of a header the gateway manages (see `MANAGED_ON_REQUEST`)."""
    return "_" in name and name.lower().replace("_", "-") in MANAGED_ON_REQUEST


def upstream_request_headers(
    incoming: CIMultiDictProxy[str],
    *,
    peer: str | None,
    scheme: str,
    upstream_host: str,
    preserve_host: bool,
    request_id: str,
    trusted: bool = False,
) -> CIMultiDict[str]:
    """The headers sent upstream: end-to-end ones plus honest forwarding information.

    `trusted` says the peer is a trusted proxy (gateway.config.trust), whose forwarding headers
    describe the original client and are kept; otherwise they are replaced or dropped.
    """
    drop = DROPPED_FROM_TRUSTED if trusted else DROPPED_ON_REQUEST
    if any("_" in k for k in incoming):  # rare: only then look for underscore spoofs
        drop = drop.union(k.lower() for k in incoming if _is_spoof(k))
    headers = _end_to_end(incoming, drop)
    original_host = incoming.get("Host", "")
    headers["Host"] = original_host if preserve_host and original_host else upstream_host
    if peer:
        prior = ", ".join(incoming.getall("X-Forwarded-For", ()))
        headers["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
    element = _forwarded(peer, original_host, scheme)
    if trusted:
        if original_host and "X-Forwarded-Host" not in headers:
            headers["X-Forwarded-Host"] = original_host
        if "X-Forwarded-Proto" not in headers:
            headers["X-Forwarded-Proto"] = scheme
        prior = ", ".join(incoming.getall("Forwarded", ()))
        headers["Forwarded"] = f"{prior}, {element}" if prior else element
    else:
        if original_host:
            headers["X-Forwarded-Host"] = original_host
        headers["X-Forwarded-Proto"] = scheme
        headers["Forwarded"] = element
    headers.add("Via", VIA)
    headers[REQUEST_ID] = request_id
    return headers


def client_response_headers(upstream: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The upstream's response headers minus hop-by-hop ones, plus `Via`.

    aiohttp's client accepts control characters in a field value that its server then
    refuses to write: one such header from the upstream would drop the client's connection
    with no response at all. RFC 9110 §5.5 lets a recipient replace them with SP instead.
    """
    headers = _end_to_end(upstream)
    if not all(value.isprintable() for value in headers.values()):  # rare: rebuild only then
        headers = CIMultiDict(
            (name, value if value.isprintable() else value.translate(_CONTROL_TO_SPACE))
            for name, value in headers.items()
        )
    headers.add("Via", VIA)
    return headers


# Every control character aiohttp's writer refuses in a field value (all but HTAB, plus DEL).
_CONTROL_TO_SPACE = {c: " " for c in (*range(0x20), 0x7F) if c != 0x09}


# Printable ASCII but `"` and `;`: a host safe to quote in `Forwarded` (one C-level match).
_HOST_TOKEN = re.compile(r"[\x21\x23-\x3a\x3c-\x7e]+")


def _forwarded(peer: str | None, host: str, scheme: str) -> str:
    parts = []
    if peer:
        parts.append(f'for="[{peer}]"' if ":" in peer else f"for={peer}")
    if _HOST_TOKEN.fullmatch(host):
        parts.append(f'host="{host}"')
    parts.append(f"proto={scheme}")
    return ";".join(parts)
