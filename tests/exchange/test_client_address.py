"""The original client behind trusted proxies (docs/mcp.md#sessions-belong-to-their-caller):
the last `X-Forwarded-For` entry a trusted hop appended, never one the client wrote itself.
The end-to-end case, with a real gateway and a peer bound to 127.0.0.2, is in
tests/mcp/test_mcp_bridge_callers.py."""

from __future__ import annotations

import pytest

from gateway.config.trust import TrustedProxies

PROXIES = TrustedProxies.build(["10.0.0.0/8", "2001:db8:ffff::/48"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("203.0.113.5", ["198.51.100.1"], "203.0.113.5"),
        ("10.0.0.1", [], "10.0.0.1"),
        ("10.0.0.1", ["198.51.100.1"], "198.51.100.1"),
        ("10.0.0.1", ["6.6.6.6, 198.51.100.1"], "198.51.100.1"),
        ("10.0.0.1", ["6.6.6.6, 198.51.100.1, 10.0.0.2"], "198.51.100.1"),
        ("10.0.0.1", ["6.6.6.6", "198.51.100.1"], "198.51.100.1"),
        ("10.0.0.1", ["10.9.9.9, 10.0.0.2"], "10.9.9.9"),
        ("10.0.0.1", ["198.51.100.1, not-an-address"], "10.0.0.1"),
        ("10.0.0.1", ["198.51.100.1, garbage, 10.0.0.2"], "10.0.0.2"),
        ("10.0.0.1", ["198.51.100.1:4711"], "198.51.100.1"),
        ("10.0.0.1", ["[2001:db8::7]:443"], "2001:db8::7"),
        ("10.0.0.1", ["::ffff:198.51.100.1"], "198.51.100.1"),
        ("2001:db8:ffff::1", ["2001:db8:1::9"], "2001:db8:1::9"),
        ("::ffff:10.0.0.1", ["198.51.100.1"], "198.51.100.1"),
        (None, ["198.51.100.1"], None),
    ],
    ids=[
        "untrusted-peer",
        "no-header",
        "one-entry",
        "client-prepended",
        "two-trusted-hops",
        "two-fields",
        "all-trusted-leftmost",
        "garbage-last",
        "garbage-mid",
        "v4-port",
        "v6-bracketed",
        "v4-mapped",
        "v6-proxy",
        "mapped-proxy",
        "no-peer",
    ],
)
def test_client_address(peer: str | None, forwarded: list[str], client: str | None) -> None:
    assert PROXIES.client_address(peer, forwarded) == client
