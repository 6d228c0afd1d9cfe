"""Draft, try and save in the console (docs/operations.md#console), in headless Chromium
against a gateway in headers mode in front of the legacy API (tests/support/legacy_api.py):
a gap's draft opened in the editor, edited, tried on the gap's sample and the captures, saved
to `console.drafts_file`, the gateway reloaded, and the gap `covered_by` the saved rule. And
what the console refuses: a save without the opt-in (404) or without a token (403), from a
foreign Origin, a rule `check` refuses, and a route's mode moved twice.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from gateway.serve.generation import CAPTURES
from tests.support.browser import Browser
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream
from tests.support.legacy_api import legacy_app
from tests.support.secrets import write_secret

TOKEN = "d1ce00d1ce00d1ce00d1ce00d1ce00d1"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def admin_url(gateway: RunningGateway, path: str) -> str:
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    return f"http://{host}:{port}{path}"


def opted_in(tmp_path: Path, upstream: str, name: str, *, token: bool = True) -> dict[str, Any]:
    drafts = tmp_path / "drafts.yaml"
    drafts.write_text("rules: []\n")
    config: dict[str, Any] = {
        "include": [str(drafts)],
        "console": {"drafts_file": str(drafts)},
        "routes": [
            {
                "name": name,
                "prefix": "/",
                "upstream": upstream,
                "mode": "headers",
                "capture": {"dir": str(tmp_path / "captures")},
            }
        ],
    }
    if token:
        write_secret(tmp_path / "admin-token", TOKEN + "\n")
        config["admin_token_file"] = str(tmp_path / "admin-token")
    return config


async def traffic(gateway: RunningGateway) -> None:
    for path in ("/accounts/11", "/accounts/12", "/accounts/13", "/audit", "/reports/4"):
        async with gateway.session.get(gateway.url + path) as answer:
            await answer.read()
    await gateway.server.app[CAPTURES].flush()


async def gaps(gateway: RunningGateway) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(admin_url(gateway, "/gaps"), headers=BEARER) as answer,
    ):
        rows: list[dict[str, Any]] = (await answer.json())["signatures"]
        return rows


async def sign_in(browser: Browser, gateway: RunningGateway) -> None:
    await browser.open(admin_url(gateway, "/ui/login"))
    await browser.fill("input[name=token]", TOKEN)
    await browser.click("form[action='/ui/login'] button")
    await browser.wait_for("return document.querySelector('table#routes') !== null;")


async def test_a_gap_is_drafted_edited_tried_saved_and_then_covered(
    browser: Browser, start_gateway: StartGateway, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(legacy_app())
    name = f"legacy-{uuid.uuid4().hex[:6]}"
    gateway = await start_gateway(opted_in(tmp_path, upstream, name), admin="127.0.0.1:0")
    await traffic(gateway)
    await sign_in(browser, gateway)
    await browser.open(admin_url(gateway, "/ui/gaps"))
    gap = f'section.gap[data-route="{name}"][data-status="404"]'
    await browser.click(f"{gap} a.edit")
    await browser.wait_for("return document.querySelector('textarea#rules') !== null;")
    draft = yaml.safe_load(await browser.script("return document.getElementById('rules').value;"))
    (rule,) = draft["rules"]
    assert rule["match"]["path"] == "/accounts/*"
    assert await browser.count("button#save") == 1

    # Edited as a reviewer would: a code of their own.
    rule["error"]["code"] = "ACCOUNT_MISSING"
    await browser.set_value("textarea#rules", yaml.safe_dump(draft, sort_keys=False))
    await browser.click("button#try")
    await browser.wait_for("return document.getElementById('summary') !== null;")
    # The gap's sample and the three captured 404s; not the 403 or the 500.
    assert await browser.text("#matched-count") == "4"
    states = await browser.attrs("table#tried tbody tr", "data-state")
    assert states.count("matched") == 4 and states.count("other") == 2
    answer = await browser.text("table#tried tbody tr:first-child pre.answer")
    assert "X-Error-Code: ACCOUNT_MISSING" in answer
    assert answer.startswith("HTTP/1.1 404 Not Found")
    assert '"errorCode": "E1004"' in answer  # headers mode: the upstream's own body
    assert [r["covered_by"] for r in await gaps(gateway) if r["status"] == "404"] == [None]
    assert yaml.safe_load((tmp_path / "drafts.yaml").read_text()) == {"rules": []}

    assert gateway.server.record.generation == 1
    await browser.click("button#save")
    await browser.wait_for("return document.getElementById('saved') !== null;")
    assert "The gateway reloaded." in await browser.text("#saved")
    assert gateway.server.record.generation == 2
    saved = yaml.safe_load((tmp_path / "drafts.yaml").read_text())["rules"]
    assert [(r["id"], r["error"]["code"]) for r in saved] == [(rule["id"], "ACCOUNT_MISSING")]
    covered = [r["covered_by"] for r in await gaps(gateway) if r["status"] == "404"]
    assert covered == [rule["id"]]
    async with gateway.session.get(gateway.url + "/accounts/99") as live:
        assert live.headers["X-Error-Code"] == "ACCOUNT_MISSING"


async def test_what_the_console_refuses_to_write(
    start_gateway: StartGateway, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(legacy_app())
    name = f"legacy-{uuid.uuid4().hex[:6]}"
    (tmp_path / "ro").mkdir()
    (tmp_path / "nt").mkdir()
    read_only = {"routes": [{"name": name, "prefix": "/", "upstream": upstream}]}
    without_token = opted_in(tmp_path / "nt", upstream, name, token=False)
    gateways = [
        await start_gateway(read_only, admin="127.0.0.1:0"),
        await start_gateway(without_token, admin="127.0.0.1:0"),
        await start_gateway(opted_in(tmp_path, upstream, name), admin="127.0.0.1:0"),
    ]
    drafts = tmp_path / "drafts.yaml"
    rule = (
        f"rules:\n- id: gone\n  match: {{routes: [{name}], status: [404]}}\n"
        "  error: {code: GONE, category: NOT_FOUND, fix_required: use an account that exists}\n"
    )
    async with aiohttp.ClientSession() as session:
        read_only_gw, no_token_gw, gateway = gateways
        async with session.post(
            admin_url(read_only_gw, "/ui/draft/save"), data={"rules": rule}
        ) as answer:
            assert answer.status == 404
            assert "console.drafts_file" in await answer.text()
        async with session.get(admin_url(read_only_gw, "/ui/draft")) as answer:
            assert 'id="read-only"' in await answer.text()
        async with session.post(
            admin_url(no_token_gw, "/ui/draft/save"), data={"rules": rule}
        ) as answer:
            assert answer.status == 403
            assert "admin token" in await answer.text()
        url = admin_url(gateway, "/ui/draft/save")
        async with session.post(url, data={"rules": rule}) as answer:
            assert answer.status == 401  # the admin guard: no token, no session
        foreign = {**BEARER, "Origin": "http://evil.example"}
        async with session.post(url, data={"rules": rule}, headers=foreign) as answer:
            assert answer.status == 403
        assert drafts.read_text() == "rules: []\n"
        bad = rule.replace("NOT_FOUND", "NOT_A_CATEGORY")
        async with session.post(url, data={"rules": bad}, headers=BEARER) as answer:
            text = await answer.text()
            assert answer.status == 200 and "rules[0].error.category" in text
            assert str(drafts) in text
        assert drafts.read_text() == "rules: []\n"
        async with session.post(url, data={"rules": rule}, headers=BEARER) as answer:
            assert 'id="saved"' in await answer.text()
        assert [r["id"] for r in yaml.safe_load(drafts.read_text())["rules"]] == ["gone"]
        mode = admin_url(gateway, "/ui/mode")
        async with session.post(mode, data={"route": name}, headers=BEARER) as answer:
            assert answer.status == 200 and 'id="moved"' in await answer.text()
        saved = yaml.safe_load(drafts.read_text())
        assert saved["route_modes"] == {name: "additive"}
        assert [r["id"] for r in saved["rules"]] == ["gone"]  # the rules kept as they were
        async with session.post(mode, data={"route": name}, headers=BEARER) as answer:
            assert answer.status == 409  # additive moves no further from the console
        async with session.post(
            admin_url(read_only_gw, "/ui/mode"), data={"route": name}, headers=BEARER
        ) as answer:
            assert answer.status == 404
