"""The console's last-hour charts (gateway/serve/console/timeline.py, charts.py): minute by
minute from the counters /metrics exports, drawn as inline SVG on the server.

The minutes are checked with real prometheus counters and a clock the test moves (an hour
is not waited for); the pages in headless Chromium against a gateway with real traffic: the
Routes chart's bars and line say what the gateway counted, the Agents chart the follow-ups
scripted agents caused, and the pages still run under the console's strict CSP.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from gateway.serve.console import charts
from gateway.serve.console.pages import SOURCES
from gateway.serve.console.timeline import hour
from gateway.serve.console.window import RecentCounts
from gateway.telemetry.metrics import samples_of
from tests.support.agents import EXPECTED, orders_app, run_all
from tests.support.browser import Browser, shot
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream
from tests.support.legacy_api import legacy_app


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_minutes_count_requests_failures_upgraded_and_recoveries() -> None:
    registry = CollectorRegistry()
    requests = Counter("mendpoint_requests", "", ["route"], registry=registry)
    failures = Counter("mendpoint_failures", "", ["route", "code"], registry=registry)
    envelopes = Counter("mendpoint_envelopes", "", ["route", "mode"], registry=registry)
    followups = Counter("mendpoint_followups", "", ["route", "code", "outcome"], registry=registry)
    clock = Clock()
    counts = RecentCounts(samples_of(registry), clock=clock)
    requests.labels("api").inc(10)
    failures.labels("api", "NOT_FOUND").inc(4)
    envelopes.labels("api", "additive").inc(3)
    envelopes.labels("api", "headers").inc(1)  # shadow: not upgraded
    followups.labels("api", "NOT_FOUND", "recovered").inc(1)
    followups.labels("api", "NOT_FOUND", "abandoned").inc(3)
    for _ in range(6):  # a tick every 10 s: the minute's reading at 60 s
        clock.now += 10
        counts.tick()
    requests.labels("api").inc(2)
    failures.labels("api", "CONFLICT").inc(2)
    clock.now += 5

    found = hour(counts.minutes())
    first, second = found.routes["api"]
    assert (first.requests, first.failures, first.upgraded) == (10, (("NOT_FOUND", 4),), 3)
    assert first.upgraded_share == 0.75
    assert (second.requests, second.failures, second.upgraded_share) == (2, (("CONFLICT", 2),), 0)
    assert found.ends_s_ago == (5.0, 0.0)
    settled = found.codes[("api", "NOT_FOUND")]
    assert [(m.settled, m.recovered) for m in settled] == [(4, 1), (0, 0)]
    assert settled[0].rate == 0.25 and settled[1].rate is None

    svg = charts.route_chart("api", found.routes["api"], found)
    assert svg.count('class="requests"') == 2
    assert 'data-code="NOT_FOUND" data-count="4"' in svg
    assert 'data-points="2"' in svg  # the share upgraded, in each minute with failures

    for _ in range(2 * 6 * 60):  # two hours: the last hour's readings are kept
        clock.now += 10
        counts.tick()
    assert len(hour(counts.minutes()).ends_s_ago) == 61  # 60 whole minutes and this one


def admin_url(gateway: RunningGateway, path: str) -> str:
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    return f"http://{host}:{port}{path}"


async def test_the_routes_chart_shows_the_minutes_counts(
    browser: Browser, start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(legacy_app())
    name = f"legacy-{uuid.uuid4().hex[:6]}"
    config = {"routes": [{"name": name, "prefix": "/", "upstream": upstream, "mode": "additive"}]}
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    for path, times in (("/accounts/1", 5), ("/audit", 2), ("/health", 3)):
        for _ in range(times):
            async with gateway.session.get(gateway.url + path) as answer:
                await answer.read()

    await browser.open(admin_url(gateway, "/ui/routes"))
    chart = f'section.timeline[data-route="{name}"]'
    assert [int(n) for n in await browser.attrs(f"{chart} rect.requests", "data-requests")] == [10]
    codes = await browser.attrs(f"{chart} rect[data-code]", "data-code")
    counts = await browser.attrs(f"{chart} rect[data-code]", "data-count")
    shown = dict(zip(codes, map(int, counts), strict=True))
    assert sum(shown.values()) == 7 and len(shown) == 2
    table = await browser.text(f'tr[data-route="{name}"] .failures')
    assert table == ", ".join(f"{code} {n}" for code, n in shown.items())
    # Additive: every classified failure upgraded, the minute's point at the top.
    assert await browser.attrs(f"{chart} circle.share", "data-share") == ["1.000"]
    assert await browser.attrs(f"{chart} circle.share", "cy") == ["3.0"]  # the top, inside
    # Drawn on the server: no script drew it, and the CSP forbids inline styles.
    async with (
        aiohttp.ClientSession() as session,
        session.get(admin_url(gateway, "/ui/routes")) as answer,
    ):
        assert "style-src 'self'" in answer.headers["Content-Security-Policy"]
        assert "style=" not in await answer.text()


async def test_the_agents_chart_shows_the_recovery_rate_per_code(
    browser: Browser, start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(orders_app())
    name = f"orders-{uuid.uuid4().hex[:6]}"
    config = {
        "routes": [{"name": name, "prefix": "/", "upstream": upstream}],
        "followups": {"window_s": 2.0},
    }
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    await run_all(gateway.url)
    await asyncio.sleep(2.6)  # every failure's window is over: each has its one outcome
    await browser.open(admin_url(gateway, "/ui/agents"))
    for code, row in EXPECTED.items():
        css = f'section.recovery-rate[data-route="{name}"][data-code="{code}"] rect'
        settled = [int(n) for n in await browser.attrs(css, "data-settled")]
        recovered = [int(n) for n in await browser.attrs(css, "data-recovered")]
        assert settled == [row["failures"]], code
        assert recovered == [row["recovered"] + row["retried_as_advised"]], code


async def test_thirteen_minutes_of_a_legacy_api_drawn_by_minute(
    browser: Browser, start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    """The Routes chart over 13 minutes of a legacy API's failures in additive mode: the
    counts are the gateway's own, and the test moves the console's clock a minute at a time
    (an hour of traffic is not waited for). `make console-screenshots` takes
    docs/img/console-charts.png here."""
    upstream = await start_upstream(legacy_app())
    config = {"routes": [{"name": "api", "prefix": "/", "upstream": upstream, "mode": "additive"}]}
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    assert gateway.server.admin_runner is not None
    counts = gateway.server.admin_runner.app[SOURCES].counts
    clock = Clock()
    clock.now = time.monotonic()
    counts._clock = clock  # the minutes' clock, moved by the test
    counts.tick()
    sent = []
    for minute in range(13):
        mix = (
            ("/health", 30 + 7 * (minute % 4)),
            ("/accounts/7", 8 + minute % 5),
            ("/audit", 6 + minute % 3),
            ("/rates", 5 + (minute * 3) % 7),
            ("/status", 4 if minute in (2, 3, 9) else 1),
        )
        for path, times in mix:
            for _ in range(times):
                async with gateway.session.get(gateway.url + path) as answer:
                    await answer.read()
        sent.append(sum(times for _, times in mix))
        clock.now += 60
        counts.tick()

    await browser.open(admin_url(gateway, "/ui/routes"))
    chart = 'section.timeline[data-route="api"]'
    bars = [int(n) for n in await browser.attrs(f"{chart} rect.requests", "data-requests")]
    assert bars[:13] == sent
    shares = await browser.attrs(f"{chart} circle.share", "data-share")
    assert shares[:13] == ["1.000"] * 13  # additive: every classified failure upgraded
    await shot(browser, "charts", at="#last-hour")
