"""The console under `serve --workers 2`, in a real headless Chromium (docs/operations.md#console).

The supervisor serves /ui from the config it loaded (and reloads as the workers do) and
from every worker's figures: Routes reads the workers' counters summed as /metrics sums
them, Gaps and Agents the tables /gaps and /followups join over the workers' links. Real
traffic goes through the two workers, each request on a connection of its own so the
kernel spreads them; each worker's own counter file is read to show both served some, and
every page must show their sum.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from prometheus_client.mmap_dict import MmapedDict

from gateway.serve import workers
from tests.support.agents import EXPECTED, orders_app, run_all
from tests.support.browser import Browser
from tests.support.gateway import StartUpstream, supervised
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.secrets import write_secret
from tests.support.waits import patience

pytestmark = pytest.mark.skipif(not workers.supported(), reason="--workers needs Linux")
WIDGETS = 24


def widgets_app() -> web.Application:
    async def widget(request: web.Request) -> web.Response:
        wid = request.match_info["wid"]
        return web.json_response({"message": f"Widget {wid} is not a known widget"}, status=404)

    app = web.Application()
    app.router.add_get("/widgets/{wid}", widget)
    return app


def counts_per_worker(metrics_dir: Path, name: str, **labels: str) -> dict[int, float]:
    """Each live worker's own count of `name` (with `labels`), from the file it writes."""
    counts: dict[int, float] = {}
    for path in metrics_dir.glob("counter_*.db"):
        pid = path.stem.split("_", 1)[1]
        if not pid.isdigit():
            continue  # the archive of exited workers
        total = 0.0
        for key, value, _, _ in MmapedDict.read_all_values_from_file(str(path)):  # type: ignore[no-untyped-call]
            _, sample, found, _ = json.loads(key)
            if sample == name and all(found.get(k) == v for k, v in labels.items()):
                total += value
        counts[int(pid)] = total
    return counts


async def fresh_get(url: str) -> int:
    """One request on a connection of its own, so the kernel picks a worker for each."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session, session.get(url) as answer:
        await answer.read()
        return answer.status


@pytest.fixture
async def fleet(start_upstream: StartUpstream, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """`serve --workers 2` with a widgets route (captured) and an orders route."""
    widgets = await start_upstream(widgets_app())
    orders = await start_upstream(orders_app())
    tag = uuid.uuid4().hex[:6]
    port, admin = free_port(), free_port()
    config = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [
            {
                "name": f"widgets-{tag}",
                "prefix": "/widgets",
                "upstream": widgets,
                "mode": "envelope",
                "capture": {"dir": str(tmp_path / "captures")},
            },
            {"name": f"orders-{tag}", "prefix": "/", "upstream": orders},
        ],
        "followups": {"window_s": 2.0},
        "log": {"access": False},
        "shutdown": {"drain_delay_s": 0.2, "grace_s": 5},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    async with supervised(path, f"127.0.0.1:{admin}", tmp, ready_s=60):
        (metrics_dir,) = tmp.glob("mendpoint-metrics-*")
        yield {
            "tag": tag,
            "url": f"http://127.0.0.1:{port}",
            "admin": f"http://127.0.0.1:{admin}",
            "config": path,
            "metrics": metrics_dir,
            "captures": tmp_path / "captures",
        }


async def test_every_page_shows_the_workers_summed_figures_and_follows_a_reload(
    browser: Browser, fleet: dict[str, Any], tmp_path: Path
) -> None:
    tag, base, admin = fleet["tag"], fleet["url"], fleet["admin"]
    widgets, orders = f"widgets-{tag}", f"orders-{tag}"
    statuses = await asyncio.gather(*(fresh_get(f"{base}/widgets/{i}") for i in range(WIDGETS)))
    assert statuses == [404] * WIDGETS
    await run_all(base)
    per_worker = counts_per_worker(
        fleet["metrics"], "mendpoint_failures_total", route=widgets, code="NOT_FOUND"
    )
    assert len(per_worker) == 2 and all(per_worker.values()), per_worker  # both served some
    assert sum(per_worker.values()) == WIDGETS

    # Routes: the sum of the two workers' counters.
    await browser.open(admin + "/ui")
    row = f'tr[data-route="{widgets}"]'
    assert await browser.text(f"{row} .failures") == f"NOT_FOUND {WIDGETS}"
    assert await browser.text(f"{row} td:nth-child(6)") == str(WIDGETS)
    assert await browser.text(f"{row} .upgraded") == "100 %"
    assert await browser.text(f"{row} .mode") == "envelope"
    orders_row = f'tr[data-route="{orders}"]'
    failures = sum(row["failures"] for row in EXPECTED.values())
    shown = await browser.text(f"{orders_row} .failures")
    assert sum(int(part.rsplit(" ", 1)[1]) for part in shown.split(", ")) == failures

    # Gaps: one signature, counted over both workers, with its drafted rule and sample.
    await browser.open(admin + "/ui/gaps")
    gap = f'section.gap[data-route="{widgets}"][data-status="404"]'
    assert await browser.text(f"{gap} .count") == str(WIDGETS)
    assert await browser.text(f"{gap} .signature") == "Widget # is not a known widget"
    assert "workers" in await browser.text("p.scope")
    draft = yaml.safe_load(await browser.text(f"{gap} pre.yaml"))
    (rule,) = draft["rules"]
    assert rule["match"]["status"] == [404] and rule["match"]["path"] == "/widgets/*"

    # Agents: every scripted agent's outcome, whichever worker saw the failure and the retry.
    await asyncio.sleep(2.6)  # every failure's window is over: each has its one outcome
    await browser.open(admin + "/ui/agents")
    chart: dict[str, dict[str, int]] = {}
    for code in await browser.attrs(f'section.agent[data-route="{orders}"]', "data-code"):
        css = f'section.agent[data-route="{orders}"][data-code="{code}"] rect'
        outcomes = await browser.attrs(css, "data-outcome")
        counts = await browser.attrs(css, "data-count")
        chart[code] = {o: int(n) for o, n in zip(outcomes, counts, strict=True)}
    assert chart == {
        code: {k: v for k, v in row.items() if v and k != "failures"}
        for code, row in EXPECTED.items()
    }

    # Try a rule: the supervisor's config explains as `mendpoint explain` does.
    body = '{"message": "Widget 7 is not a known widget"}'
    await browser.open(admin + "/ui/try")
    await browser.choose("select[name=mode]", "envelope")
    await browser.fill("input[name=path]", "/widgets/7")
    await browser.fill("input[name=status]", "404")
    await browser.set_value("textarea[name=headers]", "Content-Type: application/json")
    await browser.set_value("textarea[name=body]", body)
    await browser.click("#explain")
    await browser.wait_for("return document.querySelector('#explain-text') !== null;")
    body_file = tmp_path / "body.json"
    body_file.write_text(body)
    cli = await asyncio.to_thread(
        subprocess.run,
        [
            *(sys.executable, "-m", "gateway", "explain", "--config", str(fleet["config"])),
            *("--status", "404", "--path", "/widgets/7", "--mode", "envelope"),
            *("--header", "Content-Type:application/json", "--body", str(body_file)),
        ],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    shown_text = await browser.text("#explain-text")
    assert "rule:  http-404" in shown_text
    # The same, but for the one measured figure: how long each evaluation took.
    assert _masked(shown_text) == _masked(cli.stdout.decode())

    # An edited file reloads every worker, and the console's config with them.
    path: Path = fleet["config"]
    data = yaml.safe_load(await asyncio.to_thread(path.read_text))
    data["routes"][0]["mode"] = "original"
    await asyncio.to_thread(path.write_text, yaml.safe_dump(data, sort_keys=False))
    row = f'data-route="widgets-{fleet["tag"]}"'
    deadline = time.monotonic() + patience(20)
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(fleet["admin"] + "/ui/routes") as answer:
                page = await answer.text()
            mode = page.split(row, 1)[1].split("</tr>", 1)[0]
            if "mode-original" in mode:
                break
            assert time.monotonic() < deadline, "the console never showed the reloaded mode"
            await asyncio.sleep(0.2)
        # The workers run it too: a failure passes as the upstream sent it, on either worker.
        while True:
            async with session.get(fleet["url"] + "/widgets/1") as answer:
                assert answer.status == 404
                if await answer.json() == {"message": "Widget 1 is not a known widget"}:
                    break
            assert time.monotonic() < deadline, "the workers never ran the reloaded mode"
            await asyncio.sleep(0.2)


def _masked(text: str) -> str:
    return re.sub(r'"duration_ms": \d+', "", text)


async def fresh_code(url: str) -> str | None:
    """X-Error-Code of one request on a connection of its own (a worker the kernel picks)."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session, session.get(url) as answer:
        await answer.read()
        return answer.headers.get("X-Error-Code")


async def test_a_save_in_the_console_reloads_every_worker_once(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """The supervisor writes console.drafts_file and signals every worker; each reloads it
    once (its file watcher does not reload the file again), and so does the console."""
    upstream = await start_upstream(widgets_app())
    port, admin = free_port(), free_port()
    token = "5a7e5a7e5a7e5a7e5a7e5a7e5a7e5a7e"
    write_secret(tmp_path / "admin-token", token + "\n")
    (tmp_path / "drafts.yaml").write_text("rules: []\n")
    config = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "admin_token_file": "admin-token",
        "include": ["drafts.yaml"],
        "console": {"drafts_file": "drafts.yaml"},
        "routes": [{"name": "widgets", "prefix": "/", "upstream": upstream, "mode": "headers"}],
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    rule = (
        "rules:\n- id: widget-unknown\n  match: {routes: [widgets], status: [404]}\n"
        "  error: {code: WIDGET_UNKNOWN, category: NOT_FOUND}\n"
    )
    url = f"http://127.0.0.1:{port}/widgets/1"
    bearer = {"Authorization": f"Bearer {token}"}
    async with supervised(path, f"127.0.0.1:{admin}", tmp_path):
        assert {await fresh_code(url) for _ in range(8)} == {"NOT_FOUND"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://127.0.0.1:{admin}/ui/draft/save", data={"rules": rule}, headers=bearer
            ) as answer,
        ):
            assert "The gateway reloaded." in await answer.text()
        deadline = time.monotonic() + patience(10)
        while {await fresh_code(url) for _ in range(16)} != {"WIDGET_UNKNOWN"}:
            assert time.monotonic() < deadline, "a worker still answers with the old rules"
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.5)  # the watchers' poll and debounce
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{admin}/config", headers=bearer) as answer,
        ):
            assert (await answer.json())["generation"] == 2
    log = (tmp_path / "gateway.log").read_text()
    assert log.count("config reloaded from") == 2, log  # once per worker
    assert "console: saved rule(s) widget-unknown" in log


async def fresh_body(url: str) -> dict[str, Any]:
    """The JSON body of one request on a connection of its own (a worker the kernel picks)."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session, session.get(url) as answer:
        body: dict[str, Any] = json.loads(await answer.read())
        return body


async def test_a_route_moved_to_additive_in_the_console_answers_so_from_every_worker(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """POST /ui/mode writes `route_modes: {widgets: additive}` to console.drafts_file and
    reloads: every worker then adds the advice to the body. A second move, an unknown route,
    no token and a foreign Origin are refused, the file left as it was."""
    upstream = await start_upstream(widgets_app())
    port, admin = free_port(), free_port()
    token = "6b8f6b8f6b8f6b8f6b8f6b8f6b8f6b8f"
    write_secret(tmp_path / "admin-token", token + "\n")
    drafts = tmp_path / "drafts.yaml"
    drafts.write_text("rules: []\n")
    config = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "admin_token_file": "admin-token",
        "include": ["drafts.yaml"],
        "console": {"drafts_file": "drafts.yaml"},
        "routes": [{"name": "widgets", "prefix": "/", "upstream": upstream, "mode": "headers"}],
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{port}/widgets/1"
    mode = f"http://127.0.0.1:{admin}/ui/mode"
    bearer = {"Authorization": f"Bearer {token}"}
    async with supervised(path, f"127.0.0.1:{admin}", tmp_path), aiohttp.ClientSession() as s:
        assert [await fresh_body(url) for _ in range(4)] == [
            {"message": "Widget 1 is not a known widget"}
        ] * 4
        async with s.get(f"http://127.0.0.1:{admin}/ui/routes", headers=bearer) as answer:
            assert 'action="/ui/mode"' in await answer.text()
        async with s.post(mode, data={"route": "widgets"}) as answer:
            assert answer.status == 401
        foreign = {**bearer, "Origin": "http://evil.example"}
        async with s.post(mode, data={"route": "widgets"}, headers=foreign) as answer:
            assert answer.status == 403
        async with s.post(mode, data={"route": "gadgets"}, headers=bearer) as answer:
            assert answer.status == 404 and "is named &#x27;gadgets" in await answer.text()
        assert drafts.read_text() == "rules: []\n"
        async with s.post(mode, data={"route": "widgets"}, headers=bearer) as answer:
            said = await answer.text()
            assert answer.status == 200 and 'id="moved"' in said, said
            assert "The gateway reloaded." in said
            assert '<span class="mode mode-additive">additive</span>' in said
        assert yaml.safe_load(drafts.read_text()) == {
            "rules": [],
            "route_modes": {"widgets": "additive"},
        }
        deadline = time.monotonic() + patience(10)
        while any(["error" not in await fresh_body(url) for _ in range(16)]):
            assert time.monotonic() < deadline, "a worker still answers in headers mode"
            await asyncio.sleep(0.2)
        body = await fresh_body(url)
        assert body["message"] == "Widget 1 is not a known widget"
        assert body["error"]["code"] == "NOT_FOUND"
        async with s.post(mode, data={"route": "widgets"}, headers=bearer) as answer:
            assert answer.status == 409
            assert "is in mode additive" in await answer.text()
        async with s.get(f"http://127.0.0.1:{admin}/config", headers=bearer) as answer:
            assert (await answer.json())["generation"] == 2
    log = (tmp_path / "gateway.log").read_text()
    assert "console: route 'widgets' moved to additive" in log
    assert "console: mode change of 'gadgets' refused" in log
