"""`callers.source: trusted_header` believes the caller headers only from trusted proxies.

A client that reaches the gateway directly and names itself (`X-Caller: anyone`) with a scope
it does not hold (`X-Scopes: admin:secret`) must not be shown a skill only `admin:secret`
holders may see; the same headers from the auth layer in `trusted_proxies` are believed
(docs/security.md). Clients bind their sockets to 127.0.0.1 (untrusted) or 127.0.0.2 (trusted).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from gateway.telemetry.metrics import REGISTRY
from gateway.telemetry.reporters import SpoofReporter
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream
from tests.support.recovery import CSV_RULE, csv_failing_upstream

TRUSTED_PEER = "127.0.0.2"
UNTRUSTED_PEER = "127.0.0.1"
SPOOF = {"X-Caller": "anyone", "X-Scopes": "admin:secret"}
SECRET_SKILL = "vault.inspect_secret_rows"
METRIC = "mendpoint_untrusted_identity_headers_total"


def config(upstream: str) -> dict[str, Any]:
    return {
        "routes": [{"name": "data", "upstream": upstream, "mode": "envelope"}],
        "trusted_proxies": [f"{TRUSTED_PEER}/32"],
        "callers": {"source": "trusted_header", "header": "X-Caller", "scopes_header": "X-Scopes"},
        "rules": [CSV_RULE],
        "skills": [
            {
                "name": SECRET_SKILL,
                "version": "1.0.0",
                "recovers": ["format_inspection"],
                "repair": "inspect",
                "purpose": "Only admin:secret holders may see this.",
                "scopes": ["admin:secret"],
            }
        ],
    }


Headers = dict[str, str] | list[tuple[str, str]]


async def options_for(gateway: RunningGateway, source: str, headers: Headers) -> list[str]:
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(gateway.url + "/v1/csv", headers=CIMultiDict(headers)) as response,
    ):
        assert response.status == 400
        body = json.loads(await response.read())
    return [option["skill_name"] for option in body["recovery"]["options"]]


def spoofs_counted() -> float:
    return REGISTRY.get_sample_value(METRIC) or 0.0


def ambiguous_counted(source: str) -> float:
    sample = REGISTRY.get_sample_value("mendpoint_ambiguous_identity_total", {"source": source})
    return sample or 0.0


@pytest.fixture
async def gateway(start_upstream: StartUpstream, start_gateway: StartGateway) -> RunningGateway:
    return await start_gateway(config(await start_upstream(csv_failing_upstream())))


async def test_spoofed_identity_from_an_untrusted_peer_gets_no_options(
    gateway: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    before = spoofs_counted()
    with caplog.at_level(logging.WARNING, logger="mendpoint.callers"):
        for _ in range(3):
            assert await options_for(gateway, UNTRUSTED_PEER, SPOOF) == []
    assert spoofs_counted() - before == 3
    logged = [r.getMessage() for r in caplog.records if r.name == "mendpoint.callers"]
    assert len(logged) == 1  # once per peer per minute, however many attempts
    assert UNTRUSTED_PEER in logged[0] and "X-Caller and X-Scopes" in logged[0]
    assert "admin:secret" not in logged[0] and "anyone" not in logged[0]


async def test_the_same_headers_from_a_trusted_proxy_are_believed(
    gateway: RunningGateway,
) -> None:
    before = spoofs_counted()
    assert await options_for(gateway, TRUSTED_PEER, SPOOF) == [SECRET_SKILL]
    assert await options_for(gateway, TRUSTED_PEER, {"X-Caller": "anyone"}) == []
    assert spoofs_counted() == before


async def test_a_trusted_peer_can_be_anonymous_too(gateway: RunningGateway) -> None:
    assert await options_for(gateway, TRUSTED_PEER, {"X-Scopes": "admin:secret"}) == []


def test_each_peer_is_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    minute, always = SpoofReporter(interval_s=60), SpoofReporter(interval_s=0)
    before = spoofs_counted()
    with caplog.at_level(logging.WARNING, logger="mendpoint.callers"):
        for peer in ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.1"):
            minute.report(peer, "X-Caller")
        minute_lines = len(caplog.records)
        for _ in range(3):
            always.report("10.0.0.1", "X-Caller")
    assert minute_lines == 2
    assert len(caplog.records) - minute_lines == 3
    assert spoofs_counted() - before == 7


# An auth layer that appends its header to the client's, instead of replacing it: the
# client's claim comes first. First-wins believed it (the secret skill was offered).
AMBIGUOUS: dict[str, list[tuple[str, str]]] = {
    "caller-twice": [("X-Caller", "anyone"), ("X-Caller", "alice"), ("X-Scopes", "admin:secret")],
    "scopes-twice": [("X-Caller", "alice"), ("X-Scopes", "admin:secret"), ("X-Scopes", "read")],
    "caller-lines-combined": [("X-Caller", "anyone, alice"), ("X-Scopes", "admin:secret")],
}


@pytest.mark.parametrize("headers", list(AMBIGUOUS.values()), ids=list(AMBIGUOUS))
async def test_an_identity_sent_twice_by_a_trusted_proxy_names_nobody(
    headers: list[tuple[str, str]], gateway: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    before = ambiguous_counted("trusted_header")
    with caplog.at_level(logging.WARNING, logger="mendpoint.callers"):
        assert await options_for(gateway, TRUSTED_PEER, headers) == []
        assert await options_for(gateway, TRUSTED_PEER, headers) == []
    assert ambiguous_counted("trusted_header") - before == 2
    logged = [r.getMessage() for r in caplog.records if r.name == "mendpoint.callers"]
    assert len(logged) == 1 and TRUSTED_PEER in logged[0]
    assert "admin:secret" not in logged[0] and "anyone" not in logged[0]
    # One of each is still believed.
    assert await options_for(gateway, TRUSTED_PEER, SPOOF) == [SECRET_SKILL]


def api_key_config(upstream: str) -> dict[str, Any]:
    data = config(upstream)
    del data["trusted_proxies"]
    digest = hashlib.sha256(b"k-admin-0123456789").hexdigest()
    data["callers"] = {
        "source": "api_key",
        "header": "X-Api-Key",
        "keys": [{"name": "admin", "key": f"sha256:{digest}", "scopes": ["admin:secret"]}],
    }
    return data


API_KEYS: dict[str, list[tuple[str, str]]] = {
    "the-same-key-twice": [("X-Api-Key", "k-admin-0123456789")] * 2,
    "a-wrong-key-first": [("X-Api-Key", "k-wrong"), ("X-Api-Key", "k-admin-0123456789")],
    "a-wrong-key-second": [("X-Api-Key", "k-admin-0123456789"), ("X-Api-Key", "k-wrong")],
}


@pytest.mark.parametrize("headers", list(API_KEYS.values()), ids=list(API_KEYS))
async def test_an_api_key_sent_twice_names_nobody(
    headers: list[tuple[str, str]], start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    gateway = await start_gateway(api_key_config(await start_upstream(csv_failing_upstream())))
    before = ambiguous_counted("api_key")
    assert await options_for(gateway, UNTRUSTED_PEER, headers) == []
    assert ambiguous_counted("api_key") - before == 1
    assert await options_for(gateway, UNTRUSTED_PEER, headers[:1]) == (
        [SECRET_SKILL] if headers[0][1] == "k-admin-0123456789" else []
    )
