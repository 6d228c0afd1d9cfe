"""Comparing an answer received direct with the same one received through the gateway.

`INTENDED` is the list of response headers that may differ, each one documented in
docs/transparency.md (tests/transparency checks that the page names every one of them).
Everything else in a head, the status and the body must be equal.
"""

from __future__ import annotations

from tests.support.curl import CurlResult

# Header name → why it may differ (the section of docs/transparency.md that says so).
INTENDED: dict[str, str] = {
    "via": "Via: the gateway adds `1.1 mendpoint`",
    "x-request-id": "X-Request-Id: echoed when the upstream sent none",
    "date": "hop-by-hop framing: aiohttp writes Date when the upstream sent none",
    "server": "hop-by-hop framing: aiohttp writes Server when the upstream sent none",
    "connection": "hop-by-hop headers",
    "keep-alive": "hop-by-hop headers",
    "transfer-encoding": "hop-by-hop headers: the gateway frames each message itself",
    "content-length": "hop-by-hop headers: the gateway frames each message itself",
}


def fields(head: str) -> list[tuple[str, str]]:
    """A head's fields in order, names lower-cased, minus the intended differences."""
    out = []
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() not in INTENDED:
            out.append((name.strip().lower(), value.strip()))
    return out


def assert_equivalent(direct: CurlResult, proxied: CurlResult) -> None:
    """Same status, body, interim answers and end-to-end headers (in order)."""
    assert proxied.status == direct.status
    assert proxied.body == direct.body
    assert [h.split("\r\n")[0] for h in proxied.heads] == [h.split("\r\n")[0] for h in direct.heads]
    for got, expected in zip(proxied.heads, direct.heads, strict=True):
        assert fields(got) == fields(expected)
