"""The console's four pages in a real headless Chromium, against a gateway with real traffic
(docs/operations.md#console).

Each page is driven as a reader would: failing requests through the gateway make a gap with
its drafted rule appear, scripted agents' retries move the follow-up chart, "Try a rule"
shows what `mendpoint explain` prints, byte for byte, and with an admin token /ui is refused
until the token is given. What upstreams wrote is shown as text, never run: a `<script>` and
an `onerror` in a captured body and in a signature stay characters.

With MENDPOINT_CONSOLE_SHOTS=DIR (`make console-screenshots`) each page's test saves its
screenshot there: the docs' pictures come from this setup.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from gateway.cli import main
from gateway.serve.generation import CAPTURES
from gateway.telemetry.metrics import REGISTRY
from tests.support.agents import (
    EXPECTED,
    AgentClient,
    orders_app,
    retry_everything,
    run_all,
)
from tests.support.browser import Browser, shot
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream
from tests.support.paths import REPO
from tests.support.secrets import write_secret

XSS_SIGNATURE = "<script>window.__xss = 1</script> is not a known widget"
XSS_BODY_HTML = '<img src=x onerror="window.__xss = 2">'
XSS_TEXTAREA = "</textarea><script>window.__xss = 3</script>"
TOKEN = "c0ffee00c0ffee00c0ffee00c0ffee00"
DURATION = re.compile(rb'"duration_ms": \d+')


def widgets_app() -> web.Application:
    """Failures only the shipped defaults classify, with markup an attacker controls in the
    message and the body; and a 500 too large to be enriched (a fallback)."""

    async def widget(request: web.Request) -> web.Response:
        wid = request.match_info["wid"]
        return web.json_response(
            {"message": f"{XSS_SIGNATURE} {wid}", "hint": XSS_BODY_HTML}, status=404
        )

    async def remove(request: web.Request) -> web.Response:
        error = {"message": "Role 'viewer' may not delete", "html": XSS_TEXTAREA}
        return web.json_response({"error": error}, status=403)

    async def report(request: web.Request) -> web.Response:
        return web.Response(text="x" * 8192, status=500, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/widgets/{wid}", widget)
    app.router.add_delete("/widgets/{wid}", remove)
    app.router.add_get("/report", report)
    return app


def admin_url(gateway: RunningGateway, path: str) -> str:
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    return f"http://{host}:{port}{path}"


async def send(gateway: RunningGateway, method: str, path: str, times: int = 1) -> None:
    for _ in range(times):
        async with gateway.session.request(method, gateway.url + path) as answer:
            await answer.read()


async def test_routes_show_mode_rollout_failures_fallbacks_and_upgraded_share(
    browser: Browser, start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(widgets_app())
    tag = uuid.uuid4().hex[:6]
    shadow, live, heavy = f"shadow-{tag}", f"live-{tag}", f"heavy-{tag}"
    config = {
        "limits": {"error_body_bytes": 4096},
        "routes": [
            {
                "name": shadow,
                "prefix": "/s",
                "upstream": upstream,
                "strip_prefix": True,
                "mode": "original",
            },
            {
                "name": heavy,
                "prefix": "/r",
                "upstream": upstream,
                "strip_prefix": True,
                "mode": "envelope",
            },
            {
                "name": live,
                "prefix": "/",
                "upstream": upstream,
                "mode": "envelope",
                "rollout": {"percent": 50, "by": "request"},
            },
        ],
    }
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    await send(gateway, "GET", "/widgets/7", times=20)
    await send(gateway, "DELETE", "/widgets/7", times=2)
    await send(gateway, "GET", "/r/report")
    await send(gateway, "GET", "/s/widgets/8", times=4)

    await browser.open(admin_url(gateway, "/ui"))
    await shot(browser, "routes")
    row = f'tr[data-route="{live}"]'
    assert "envelope" in await browser.text(f"{row} .mode")
    assert "50 % by request" in await browser.text(row)
    assert await browser.text(f"{row} .failures") == "NOT_FOUND 20, FORBIDDEN 2"
    # Too large to rewrite: sent as it came, with the advisory headers (upgraded, at most).
    heavy_row = f'tr[data-route="{heavy}"]'
    assert await browser.text(f"{heavy_row} .failures") == "UPSTREAM_INTERNAL_ERROR 1"
    assert await browser.text(f"{heavy_row} .fallbacks") == "body_too_large 1"
    assert await browser.text(f"{heavy_row} .upgraded") == "0 %"
    # About half the requests get the route's mode, the others headers only (shadow): the
    # share is the gateway's own count of envelopes.
    upgraded = REGISTRY.get_sample_value(
        "mendpoint_envelopes_total", {"route": live, "mode": "envelope"}
    )
    assert upgraded is not None
    assert 2 < upgraded < 20
    assert await browser.text(f"{row} .upgraded") == f"{round(100 * upgraded / 22)} %"
    shadow_row = f'tr[data-route="{shadow}"]'
    assert await browser.text(f"{shadow_row} .mode") == "original"
    assert await browser.text(f"{shadow_row} .failures") == "NOT_FOUND 4"
    assert await browser.text(f"{shadow_row} .upgraded") == "0 %"

    await send(gateway, "GET", "/widgets/9", times=2)
    await browser.open(admin_url(gateway, "/ui/routes"))
    assert (await browser.text(f"{row} .failures")).startswith("NOT_FOUND 22,")


async def test_a_gap_appears_after_failures_with_its_draft_and_upstream_markup_stays_text(
    browser: Browser,
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    tmp_path: Path,
) -> None:
    upstream = await start_upstream(widgets_app())
    captures = tmp_path / "captures"
    name = f"widgets-{uuid.uuid4().hex[:6]}"
    config = {
        "routes": [
            {"name": name, "prefix": "/", "upstream": upstream, "capture": {"dir": str(captures)}}
        ]
    }
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    await browser.open(admin_url(gateway, "/ui/gaps"))
    assert await browser.count("section.gap") == 0

    await send(gateway, "GET", "/widgets/1")
    await send(gateway, "GET", "/widgets/2")
    await send(gateway, "DELETE", "/widgets/3")
    await gateway.server.app[CAPTURES].flush()
    await browser.open(admin_url(gateway, "/ui/gaps"))
    await shot(browser, "gaps")

    gap = f'section.gap[data-route="{name}"][data-status="404"]'
    assert (await browser.text(f"{gap} .count")) == "2"
    signature = await browser.text(f"{gap} .signature")
    assert signature == "<script>window.__xss = #</script> is not a known widget #"
    sample = await browser.text(f"{gap} pre.sample")
    assert XSS_BODY_HTML.replace('"', '\\"') in sample
    # Shown as characters: no element the upstream wrote exists, and nothing of it ran.
    assert await browser.count("main script, main img") == 0
    assert await browser.script("return window.__xss === undefined;")

    draft = yaml.safe_load(await browser.text(f"{gap} pre.yaml"))
    out = tmp_path / "drafts.yaml"
    running = str(tmp_path / "gateway.yaml")  # the file start_gateway wrote and loaded
    argv = ["suggest", "--from", str(captures), "--config", running, "--out", str(out)]
    assert await asyncio.to_thread(main, argv) == 0
    written = {rule["id"]: rule for rule in yaml.safe_load(out.read_text())["rules"]}
    (rule,) = draft["rules"]
    assert rule == written[rule["id"]]
    assert rule["match"]["status"] == [404] and rule["match"]["path"] == "/widgets/*"


async def test_the_follow_up_chart_moves_after_scripted_retries(
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
    await browser.open(admin_url(gateway, "/ui/agents?refresh=1"))
    await shot(browser, "agents")

    codes = await browser.attrs("section.agent", "data-code")
    assert codes == ["BAD_REQUEST", "RATE_LIMITED", "CONFLICT"]  # worst advice first
    shown = await chart(browser, name)
    assert shown == {
        code: {k: v for k, v in row.items() if v and k != "failures"}
        for code, row in EXPECTED.items()
    }

    # Three more retries of the same bad request: the page, refreshing itself, shows them.
    client = AgentClient(gateway.url, "retry-again", fresh_connections=False)
    try:
        await retry_everything(client.send)
    finally:
        await client.close()
    await browser.wait_for(
        "return document.querySelector('section.agent[data-code=BAD_REQUEST] "
        "rect[data-outcome=retried_unchanged]').dataset.count === '6';",
        timeout_s=15,
    )
    assert (await chart(browser, name))["BAD_REQUEST"]["retried_unchanged"] == 6


async def chart(browser: Browser, route: str) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for code in await browser.attrs(f'section.agent[data-route="{route}"]', "data-code"):
        css = f'section.agent[data-route="{route}"][data-code="{code}"] rect'
        outcomes = await browser.attrs(css, "data-outcome")
        counts = await browser.attrs(css, "data-count")
        found[code] = {o: int(n) for o, n in zip(outcomes, counts, strict=True)}
    return found


async def test_try_a_rule_shows_what_mendpoint_explain_prints(
    browser: Browser, start_gateway: StartGateway, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(widgets_app())
    captures = tmp_path / "captures"
    config: dict[str, Any] = {
        "routes": [
            {
                "name": "widgets",
                "prefix": "/",
                "upstream": upstream,
                "capture": {"dir": str(captures)},
            }
        ],
        "rules": [
            {
                "id": "widget-conflict",
                "match": {
                    "status": [404],
                    "methods": ["POST"],
                    "json": {"path": "message", "regex": "taken"},
                },
                "error": {"code": "WIDGET_TAKEN", "category": "CONFLICT"},
            },
            {
                "id": "widget-gone",
                "match": {
                    "status": [404],
                    "path": "/widgets/**",
                    "json": {"path": "message", "regex": "gone"},
                },
                "error": {"code": "WIDGET_GONE", "category": "NOT_FOUND"},
            },
            {
                "id": "widget-delete",
                "match": {"status": [404], "methods": ["DELETE"]},
                "error": {"code": "WIDGET_DELETE", "category": "NOT_FOUND"},
            },
        ],
    }
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    body = '{"message": "Widget 12 is gone", "detail": "<b>bold</b>"}'
    await browser.open(admin_url(gateway, "/ui/try"))
    await browser.choose("select[name=mode]", "envelope")
    await browser.fill("input[name=method]", "GET")
    await browser.fill("input[name=path]", "/widgets/12")
    await browser.fill("input[name=status]", "404")
    await browser.set_value("textarea[name=headers]", "Content-Type: application/json")
    await browser.set_value("textarea[name=body]", body)
    await browser.click("#explain")
    # The form's page already has an empty #result: wait for the answer's page to fill it.
    await browser.wait_for(
        "const r = document.querySelector('#result'); return !!r && r.children.length > 0;"
    )
    assert await browser.count("#explain-text") == 1, await browser.text("#result")
    await shot(browser, "try", at="#result")

    body_file = tmp_path / "body.json"
    body_file.write_text(body)
    config_file = tmp_path / "gateway.yaml"  # what start_gateway wrote
    cli = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "gateway",
            "explain",
            "--config",
            str(config_file),
            "--status",
            "404",
            "--path",
            "/widgets/12",
            "--header",
            "Content-Type:application/json",
            "--body",
            str(body_file),
            "--mode",
            "envelope",
        ],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    # Byte for byte, but for the one measured figure: how long this evaluation took.
    shown = (await browser.text("#explain-text")).encode()
    assert DURATION.sub(b"", shown) == DURATION.sub(b"", cli.stdout)
    assert len(DURATION.findall(cli.stdout)) == 1
    assert await browser.text("#matched") == "widget-gone"
    answer = await browser.text("#answer")
    assert answer.startswith("HTTP/1.1 404 Not Found\n") and '"code":"WIDGET_GONE"' in answer
    # The rule after the match is named, with why it was not the one.
    others = await browser.text("#others")
    assert "widget-delete" in others and "not tried: widget-gone matched first" in others
    # The rule before it, with each condition it failed, tried alone by the matcher.
    conflict = await browser.text("#others tbody tr:first-child")
    assert conflict.startswith("widget-conflict")
    assert "method GET is not one of POST" in conflict
    assert "json message: no value there matches" in conflict

    # A captured sample, picked from the list: DELETE misses widget-gone on its message.
    await send(gateway, "DELETE", "/widgets/5")
    await gateway.server.app[CAPTURES].flush()
    await browser.open(admin_url(gateway, "/ui/try"))
    await browser.click(".picker button")
    await browser.wait_for("return document.querySelector('input[name=status]').value === '403';")
    assert (
        await browser.script("return document.querySelector('input[name=path]').value;")
        == "/widgets/5"
    )
    body_field = "return document.querySelector('textarea[name=body]').value;"
    assert XSS_TEXTAREA in await browser.script(body_field)  # the body, as text, in its field
    assert await browser.script("return window.__xss === undefined;")
    await browser.click("#explain")
    await browser.wait_for("return document.querySelector('#explain-text') !== null;")
    assert "rule:  http-403" in await browser.text("#explain-text")
    assert XSS_TEXTAREA in await browser.text("#answer")
    assert await browser.count("main script") == 0


async def status_with_cookie(url: str, value: str) -> int:
    async with (
        aiohttp.ClientSession(cookies={"mendpoint_console": value}) as session,
        session.get(url) as answer,
    ):
        return answer.status


async def test_with_a_token_the_console_is_refused_until_signed_in(
    browser: Browser, start_gateway: StartGateway, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(widgets_app())
    token_file = tmp_path / "admin-token"
    write_secret(token_file, TOKEN + "\n")
    config = {
        "admin_token_file": str(token_file),
        "routes": [{"name": "api", "prefix": "/", "upstream": upstream}],
    }
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    async with aiohttp.ClientSession() as session:
        for path in (
            "/ui",
            "/ui/routes",
            "/ui/gaps",
            "/ui/agents",
            "/ui/try",
            "/ui/static/console.js",
        ):
            async with session.get(admin_url(gateway, path)) as answer:
                assert answer.status == 401, path
                assert "admin_token_file" in await answer.text()
        async with session.post(admin_url(gateway, "/ui/try"), data={"status": "404"}) as answer:
            assert answer.status == 401
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with session.get(admin_url(gateway, "/ui/gaps"), headers=bearer) as answer:
            assert answer.status == 200

    await browser.open(admin_url(gateway, "/ui/agents"))
    assert await browser.count("form[action='/ui/login']") == 1
    await browser.fill("input[name=token]", "not-the-token-at-all-0000000000")
    await browser.click("form[action='/ui/login'] button")
    await browser.wait_for("return document.querySelector('.error') !== null;")
    assert await browser.count("nav") == 0
    await browser.fill("input[name=token]", TOKEN)
    await browser.click("form[action='/ui/login'] button")
    await browser.wait_for("return document.querySelector('table#routes') !== null;")
    cookie = await browser.run(browser.driver.get_cookie, "mendpoint_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    assert TOKEN not in cookie["value"]  # a session, never the token (.sessions)
    await browser.run(browser.driver.delete_all_cookies)

    # The cookie opens only the console: the JSON API still wants the header.
    async with aiohttp.ClientSession(cookies={"mendpoint_console": cookie["value"]}) as session:
        async with session.get(admin_url(gateway, "/gaps")) as answer:
            assert answer.status == 401
        async with session.get(admin_url(gateway, "/ui/gaps")) as answer:
            assert answer.status == 200
    # The token itself in the cookie, as the console set it before: not a session.
    assert await status_with_cookie(admin_url(gateway, "/ui/gaps"), TOKEN) == 401


async def test_without_a_token_the_console_answers_only_its_address_and_its_own_forms(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    """A page on a DNS name rebound to 127.0.0.1 sends that name as Host: refused."""
    upstream = await start_upstream(widgets_app())
    gateway = await start_gateway(
        {"routes": [{"name": "api", "prefix": "/", "upstream": upstream}]}, admin="127.0.0.1:0"
    )
    async with aiohttp.ClientSession() as session:
        async with session.get(
            admin_url(gateway, "/ui"), headers={"Host": "evil.example:8491"}
        ) as answer:
            assert answer.status == 403
        async with session.get(admin_url(gateway, "/ui"), headers={"Host": "localhost"}) as answer:
            assert answer.status == 200
            assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
        foreign = {"Origin": "http://evil.example"}
        async with session.post(
            admin_url(gateway, "/ui/try"), data={"status": "404"}, headers=foreign
        ) as answer:
            assert answer.status == 403
        async with session.get(
            admin_url(gateway, "/gaps"), headers={"Host": "evil.example"}
        ) as answer:
            assert answer.status == 403  # as every admin path (docs/security.md#dns-rebinding)
