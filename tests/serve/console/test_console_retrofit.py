"""The retrofit loop end to end, as docs/retrofit.md walks it: real `mendpoint` processes in
front of the legacy API of the test set-up (tests/support/legacy_api.py: non-standard JSON
keys, XML, HTML and text errors), the console driven in headless Chromium.

`init` → `check` → `serve` in headers mode with capture → traffic → the Gaps page → a draft
opened, tried on its own samples and the captures, saved to `console.drafts_file` → the
gateway reloads once (not again when its file watcher sees the file it just read) → the gap
reads `covered_by` the saved rule → the route moved to `additive` by the Routes page's button
(`route_modes:` in the drafts file) → `/followups` rows with
`open`. Slow (`make test-slow`): two processes, a browser, and the watcher's poll.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.support.browser import Browser, shot
from tests.support.gateway import StartUpstream, start_process, stop_process, wait_ready
from tests.support.legacy_api import legacy_app
from tests.support.paths import REPO
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

TRAFFIC = (
    ("/accounts/11", 404),  # {"errorCode": "E1004", "errorMessage": …}
    ("/accounts/12", 404),
    ("/accounts/13", 404),
    ("/audit", 403),  # XML
    ("/audit", 403),
    ("/reports/4", 500),  # an HTML page
    ("/status", 503),  # plain text
    ("/accounts/me", 401),
)


async def run(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def admin_json(session: aiohttp.ClientSession, url: str, token: str) -> Any:
    async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as answer:
        assert answer.status == 200, await answer.text()
        return await answer.json()


async def test_the_loop_from_init_to_a_saved_rule_that_covers_its_gap(
    browser: Browser, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(legacy_app())
    config_path = tmp_path / "mendpoint.yaml"
    code, said = await run("init", "--upstream", upstream, "--out", str(config_path))
    assert code == 0, said
    token = (tmp_path / "mendpoint-admin-token").read_text().splitlines()[0]
    config = yaml.safe_load(config_path.read_text())
    (route,) = config["routes"]
    assert route["mode"] == "headers" and route["capture"]["only"] == "unmatched"
    assert config["console"]["drafts_file"] in config["include"]  # init opted in
    port, admin = free_port(), free_port()
    config |= {"listen": f"127.0.0.1:{port}", "admin": f"127.0.0.1:{admin}"}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    code, said = await run("check", "--config", str(config_path))
    assert code == 0 and ": OK — 1 route(s)" in said, said

    process = await start_process("serve", "--config", str(config_path))
    admin_url = f"http://127.0.0.1:{admin}"
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"{admin_url}/readyz", process)
            for path, status in TRAFFIC:
                async with session.get(f"http://127.0.0.1:{port}{path}") as answer:
                    assert answer.status == status
                    assert "X-Error-Code" in answer.headers
                    await answer.read()
            await asyncio.sleep(0.5)  # capture files are written off the request path

            await browser.open(f"{admin_url}/ui/login")
            await browser.fill("input[name=token]", token)
            await browser.click("form[action='/ui/login'] button")
            await browser.wait_for("return document.querySelector('table#routes') !== null;")
            await browser.open(f"{admin_url}/ui/gaps")
            gap = f'section.gap[data-route="{route["name"]}"][data-status="404"]'
            assert await browser.text(f"{gap} .count") == "3"
            await browser.click(f"{gap} a.edit")
            await browser.wait_for("return document.querySelector('textarea#rules') !== null;")
            await browser.click("button#try")
            await browser.wait_for("return document.getElementById('summary') !== null;")
            # The gap's own sample and its three captures; not the XML, HTML or text ones.
            assert await browser.text("#matched-count") == "4"
            states = await browser.attrs("table#tried tbody tr", "data-state")
            assert states.count("other") == 5, states
            draft = yaml.safe_load(
                await browser.script("return document.getElementById('rules').value;")
            )
            rule_id = draft["rules"][0]["id"]
            status = await admin_json(session, f"{admin_url}/config", token)
            assert status["generation"] == 1

            await browser.click("button#save")
            await browser.wait_for("return document.getElementById('saved') !== null;")
            assert "The gateway reloaded." in await browser.text("#saved")
            await asyncio.sleep(2.5)  # the watcher's poll and debounce: no second reload
            status = await admin_json(session, f"{admin_url}/config", token)
            assert status["generation"] == 2, status
            gaps = await admin_json(session, f"{admin_url}/gaps", token)
            covered = {row["status"]: row["covered_by"] for row in gaps["signatures"]}
            assert covered["404"] == rule_id
            assert covered["403"] is None  # its own draft is not saved yet

            # The XML 403's draft, on the code it states, tried (docs/img/console-draft.png).
            await browser.open(f"{admin_url}/ui/gaps")
            await browser.click(
                f'section.gap[data-route="{route["name"]}"][data-status="403"] a.edit'
            )
            await browser.wait_for("return document.querySelector('textarea#rules') !== null;")
            xml = yaml.safe_load(
                await browser.script("return document.getElementById('rules').value;")
            )
            assert xml["rules"][0]["error"]["code"] == "AUDIT_FORBIDDEN"
            assert xml["rules"][0]["match"]["body"] == "<code>AUDIT_FORBIDDEN</code>"
            await browser.click("button#try")
            await browser.wait_for("return document.getElementById('summary') !== null;")
            assert await browser.text("#matched-count") == "3"  # its sample and two captures
            await shot(browser, "draft")

            # Agents recover with the headers: the route moves to additive, from the console.
            await browser.open(f"{admin_url}/ui/routes")
            row = f'tr[data-route="{route["name"]}"]'
            await browser.click(f"{row} form.move-mode button")
            await browser.wait_for("return document.getElementById('moved') !== null;")
            assert "The gateway reloaded." in await browser.text("#moved")
            assert await browser.text(f"{row} span.mode") == "additive"
            assert await browser.count("form.move-mode") == 0
            moved = yaml.safe_load((tmp_path / "console-drafts.yaml").read_text())
            assert moved["route_modes"] == {route["name"]: "additive"}
            await asyncio.sleep(2.5)  # the watcher's poll and debounce: no second reload
            status = await admin_json(session, f"{admin_url}/config", token)
            assert status["generation"] == 3, status
            async with session.get(f"http://127.0.0.1:{port}/accounts/14") as answer:
                body = await answer.json()
            assert body["errorCode"] == "E1004"  # the upstream's own keys stay
            assert body["error"]["code"] == draft["rules"][0]["error"]["code"]
            follow = await admin_json(session, f"{admin_url}/followups", token)
            rows = [r for r in follow["codes"] if r["code"] == body["error"]["code"]]
            assert rows and rows[0]["open"] >= 1
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr
    assert "console: saved rule(s) " + rule_id in stderr
    assert f"console: route {route['name']!r} moved to additive" in stderr
    assert stderr.count("config reloaded from") == 2, stderr
