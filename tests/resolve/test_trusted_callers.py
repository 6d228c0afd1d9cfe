"""`callers.source: trusted_header` believes the caller headers only from trusted proxies.

A client that reaches the gateway directly and names itself (`X-Caller: anyone`) with a scope
it does not hold (`X-Scopes: admin:secret`) must not be shown a skill only `admin:secret`
holders may see; the same headers from the auth layer in `trusted_proxies` are believed
(docs/security.md). Clients bind their sockets to 127.0.0.1 (untrusted) or 127.0.0.2 (trusted).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
import pytest

from gateway.observe import REGISTRY, SpoofReporter
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


async def options_for(gateway: RunningGateway, source: str, headers: dict[str, str]) -> list[str]:
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(gateway.url + "/v1/csv", headers=headers) as response,
    ):
        assert response.status == 400
        body = json.loads(await response.read())
    return [option["skill_name"] for option in body["recovery"]["options"]]


def spoofs_counted() -> float:
    return REGISTRY.get_sample_value(METRIC) or 0.0


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
