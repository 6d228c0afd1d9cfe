"""Forwarding headers and `trusted_proxies`, proved differentially (docs/security.md).

Each case sends the same hand-written request to a recording upstream directly and through the
gateway, from 127.0.0.2 (listed in `trusted_proxies`) and from 127.0.0.1 (not listed), and
compares what the upstream saw. From the trusted peer the only differences are the documented
ones: Host rewritten, `X-Forwarded-For` gains the peer, `Forwarded` gains this hop's element,
`X-Forwarded-Host`/`-Proto` are added only when the proxy did not send them, and `Via` and
`X-Request-Id` are added. From the untrusted peer the client's claims are replaced or dropped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.config.trust import TrustedProxies
from tests.support.gateway import (
    RunningGateway,
    StartGateway,
    StartUpstream,
    exchange_raw,
    route_config,
)

TRUSTED_PEER = "127.0.0.2"
UNTRUSTED_PEER = "127.0.0.1"
HOST = "api.example.com"
HOP = {"connection", "host"}  # describe the client's own connection: never compared
ADDED = {"via", "x-request-id"}  # the gateway's own, on every forwarded request


class Recorder:
    """An upstream that records every request's headers exactly as they arrived."""

    def __init__(self) -> None:
        self.seen: list[CIMultiDictProxy[str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers)
        return web.Response(text="ok")


async def send(base_url: str, claims: list[tuple[str, str]], source: str) -> None:
    lines = "".join(f"{name}: {value}\r\n" for name, value in claims)
    head = f"GET /orders?page=2 HTTP/1.1\r\nHost: {HOST}\r\n{lines}Connection: close\r\n\r\n"
    response = await exchange_raw(base_url, head.encode("latin-1"), source=source)
    assert response.status == 200


def end_to_end(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in HOP | ADDED)


def expected_through_gateway(direct: CIMultiDictProxy[str], peer: str) -> CIMultiDict[str]:
    """What a trusted proxy's request should look like upstream: the documented differences."""
    expected = end_to_end(direct)
    prior = ", ".join(direct.getall("X-Forwarded-For", ()))
    expected["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
    element = f'for={peer};host="{HOST}";proto=http'
    forwarded = ", ".join(direct.getall("Forwarded", ()))
    expected["Forwarded"] = f"{forwarded}, {element}" if forwarded else element
    expected.setdefault("X-Forwarded-Host", HOST)
    expected.setdefault("X-Forwarded-Proto", "http")
    return expected


def as_set(headers: CIMultiDict[str]) -> set[tuple[str, str]]:
    return {(k.lower(), v) for k, v in headers.items()}


CLAIMS = {
    "none": [],
    "ingress-tls": [("X-Forwarded-Proto", "https"), ("X-Forwarded-Port", "443")],
    "every-header": [
        ("X-Forwarded-For", "203.0.113.7"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "shop.example.com"),
        ("X-Forwarded-Port", "443"),
        ("X-Forwarded-Prefix", "/shop"),
        ("X-Real-IP", "203.0.113.7"),
        ("True-Client-IP", "203.0.113.7"),
        ("Forwarded", 'for=203.0.113.7;host="shop.example.com";proto=https'),
    ],
    "chains": [
        ("X-Forwarded-For", "203.0.113.7, 198.51.100.1"),
        ("X-Forwarded-For", "10.1.1.1"),
        ("Forwarded", "for=203.0.113.7;proto=https"),
        ("Forwarded", "for=198.51.100.1, for=10.1.1.1"),
    ],
    # Client-address claims that address resolvers read before X-Forwarded-For, and URL
    # overrides that Symfony, Laravel, Zend and IIS routed on in place of the request line.
    "address-and-url-overrides": [
        ("X-Client-IP", "203.0.113.7"),
        ("CF-Connecting-IP", "203.0.113.7"),
        ("Fastly-Client-IP", "203.0.113.7"),
        ("X-Cluster-Client-IP", "203.0.113.7"),
        ("X-AppEngine-User-IP", "203.0.113.7"),
        ("CF-Pseudo-IPv4", "203.0.113.7"),
        ("X-Forwarded", "for=203.0.113.7"),
        ("Forwarded-For", "203.0.113.7"),
        ("X-Original-Forwarded-For", "203.0.113.7"),
        ("X-Original-URL", "/admin/users"),
        ("X-Rewrite-URL", "/admin/users"),
        ("X-Original-URI", "/admin/users"),
        ("X-Forwarded-Uri", "/admin/users"),
        ("X-Forwarded-Method", "DELETE"),
        ("X-Forwarded-Server", "internal.example"),
        ("X-Forwarded-Scheme", "https"),
        ("X-Forwarded-Ssl", "on"),
        ("X-Kept", "an end-to-end header passes"),
    ],
}
TRUSTED_ONLY = {
    "x-forwarded-port",
    "x-forwarded-prefix",
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
    "x-original-url",
    "x-rewrite-url",
    "x-original-uri",
    "x-forwarded-uri",
    "x-forwarded-method",
    "x-forwarded-server",
    "x-forwarded-scheme",
    "x-forwarded-ssl",
}


@pytest.fixture
async def setup(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> tuple[Recorder, str, RunningGateway]:
    recorder = Recorder()
    upstream = await start_upstream(recorder.app())
    config = route_config(upstream)
    config["trusted_proxies"] = [f"{TRUSTED_PEER}/32", "2001:db8::/32"]
    return recorder, upstream, await start_gateway(config)


@pytest.mark.parametrize("claims", list(CLAIMS.values()), ids=list(CLAIMS))
async def test_a_trusted_proxys_forwarding_headers_are_kept_and_appended_to(
    claims: list[tuple[str, str]], setup: tuple[Recorder, str, RunningGateway]
) -> None:
    recorder, upstream, gateway = setup
    await send(upstream, claims, TRUSTED_PEER)
    await send(gateway.url, claims, TRUSTED_PEER)
    direct, through = recorder.seen
    assert through["Host"] == URL(upstream).raw_authority
    assert through.getall("Via") == ["1.1 mendpoint"]
    assert through["X-Request-Id"]
    assert as_set(end_to_end(through)) == as_set(expected_through_gateway(direct, TRUSTED_PEER))
    assert len(through.getall("Forwarded")) == 1  # one field, elements in hop order


@pytest.mark.parametrize("claims", list(CLAIMS.values()), ids=list(CLAIMS))
async def test_an_untrusted_peers_forwarding_claims_are_replaced_or_dropped(
    claims: list[tuple[str, str]], setup: tuple[Recorder, str, RunningGateway]
) -> None:
    recorder, upstream, gateway = setup
    await send(upstream, claims, UNTRUSTED_PEER)
    await send(gateway.url, claims, UNTRUSTED_PEER)
    direct, through = recorder.seen
    for name in TRUSTED_ONLY:
        assert name not in through, name
    assert through.getall("X-Forwarded-Host") == [HOST]
    assert through.getall("X-Forwarded-Proto") == ["http"]
    assert through.getall("Forwarded") == [f'for={UNTRUSTED_PEER};host="{HOST}";proto=http']
    prior = ", ".join(direct.getall("X-Forwarded-For", ()))
    expected_xff = f"{prior}, {UNTRUSTED_PEER}" if prior else UNTRUSTED_PEER
    assert through.getall("X-Forwarded-For") == [expected_xff]
    # Everything else passes exactly as it would have gone direct.
    managed = TRUSTED_ONLY | {"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto"}
    managed |= {"forwarded"}
    untouched = CIMultiDict((k, v) for k, v in direct.items() if k.lower() not in HOP | managed)
    rest = CIMultiDict((k, v) for k, v in end_to_end(through).items() if k.lower() not in managed)
    assert as_set(rest) == as_set(untouched)


async def test_underscore_spellings_are_dropped_even_from_a_trusted_proxy(
    setup: tuple[Recorder, str, RunningGateway],
) -> None:
    recorder, _, gateway = setup
    await send(
        gateway.url, [("X_Real_IP", "10.6.6.6"), ("True_Client_IP", "10.6.6.6")], TRUSTED_PEER
    )
    assert "10.6.6.6" not in recorder.seen[-1].values()


async def test_reload_changes_who_is_trusted(
    start_upstream: StartUpstream, start_gateway: StartGateway, tmp_path: Path
) -> None:
    recorder = Recorder()
    upstream = await start_upstream(recorder.app())
    gateway = await start_gateway(route_config(upstream))
    claims = [("X-Forwarded-Proto", "https"), ("X-Real-IP", "203.0.113.7")]
    await send(gateway.url, claims, TRUSTED_PEER)
    assert recorder.seen[-1].getall("X-Forwarded-Proto") == ["http"]
    assert "X-Real-IP" not in recorder.seen[-1]
    config = {**route_config(upstream), "trusted_proxies": [TRUSTED_PEER]}
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(config))
    assert await gateway.server.reload()
    await send(gateway.url, claims, TRUSTED_PEER)
    assert recorder.seen[-1].getall("X-Forwarded-Proto") == ["https"]
    assert recorder.seen[-1].getall("X-Real-IP") == ["203.0.113.7"]


# --- the list itself ----------------------------------------------------------------------

VERDICTS = {
    "inside-v4": ("10.20.0.0/16", "10.20.3.4", True),
    "outside-v4": ("10.20.0.0/16", "10.21.0.1", False),
    "single-address": ("127.0.0.2", "127.0.0.2", True),
    "neighbour-of-single": ("127.0.0.2", "127.0.0.1", False),
    "v6": ("2001:db8::/32", "2001:db8::1", True),
    "v4-mapped-peer": ("10.0.0.0/8", "::ffff:10.1.2.3", True),
    "zone-id": ("fe80::/10", "fe80::1%eth0", True),
    "not-an-address": ("10.0.0.0/8", "unix-socket", False),
    "no-peer": ("10.0.0.0/8", "", False),
}


@pytest.mark.parametrize(("block", "peer", "trusted"), list(VERDICTS.values()), ids=list(VERDICTS))
def test_trust_is_decided_by_the_peer_address(block: str, peer: str, trusted: bool) -> None:
    proxies = TrustedProxies.build([block])
    assert proxies.trusts(peer) is trusted
    assert proxies.trusts(peer) is trusted  # the remembered verdict is the same
    assert TrustedProxies.build([]).trusts(peer) is False


BAD_LISTS = {
    "host-bits": ("10.0.0.1/8", "write 10.0.0.0/8 for the whole block"),
    "not-a-network": ("ten.zero/8", "is not an IP network"),
    "bad-prefix": ("10.0.0.0/33", "is not an IP network"),
}


@pytest.mark.parametrize(("block", "message"), list(BAD_LISTS.values()), ids=list(BAD_LISTS))
def test_a_bad_block_is_refused_with_file_line_and_field(
    block: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\n"
        f"trusted_proxies:\n  - 127.0.0.1\n  - '{block}'\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert f"gateway.yaml:5: trusted_proxies[1]: Value error, {block!r}" in str(caught.value)
    assert message in str(caught.value)


def test_trusted_header_callers_need_trusted_proxies(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\n"
        "callers:\n  source: trusted_header\n  header: X-Caller\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert "gateway.yaml:4: callers.source: trusted_header believes" in str(caught.value)
    path.write_text(path.read_text() + "trusted_proxies: [10.0.0.0/8]\n")
    assert load_config(str(path)).config.trusted_proxies == ["10.0.0.0/8"]
