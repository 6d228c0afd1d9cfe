"""One captured body whose draft's regex times out costs that group its match on words,
nothing else (docs/rules.md#drafts-from-traffic-capture-and-suggest).

A 589-byte text body of repeated phrases (`row 1:7 bad value 3; row 2:14 …`) makes the draft's
pattern, with a capture per number, search a sample for longer than its timeout. On main that
one `TimeoutError` made `mendpoint suggest` exit 1 drafting nothing and the console's Gaps
page answer 504 for everyone. Through a real capturing gateway process: the other failure is
drafted on its words, the timed-out group on status and path (a draft tried like any other:
it wins its samples) with a review line saying why, and /ui/gaps answers 200.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.cli import main
from tests.support.gateway import StartUpstream, supervised, write_config
from tests.support.ports import free_port

ROWS = "".join(f"row {i}:{i * 7} bad value {i * 3}; " for i in range(1, 40))[:589]


def legacy() -> web.Application:
    async def rows(request: web.Request) -> web.Response:
        return web.Response(status=400, text=ROWS, content_type="text/plain")

    async def items(request: web.Request) -> web.Response:
        return web.json_response({"message": "item not found"}, status=404)

    app = web.Application()
    app.router.add_post("/rows", rows)
    app.router.add_get("/items/{id}", items)
    return app


async def test_a_pattern_that_times_out_costs_only_its_own_draft(
    start_upstream: StartUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = await start_upstream(legacy())
    captures = tmp_path / "captures"
    listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    route: dict[str, object] = {"name": "api", "prefix": "/", "upstream": upstream}
    route.update(mode="headers", capture={"dir": str(captures)})
    config = write_config(tmp_path, {"listen": listen, "admin": admin, "routes": [route]})
    async with (
        supervised(config, admin, tmp_path, workers=None),
        aiohttp.ClientSession() as session,
    ):
        for _ in range(2):
            async with session.post(f"http://{listen}/rows") as response:
                assert response.status == 400
            async with session.get(f"http://{listen}/items/42") as response:
                assert response.status == 404
        await asyncio.sleep(0.5)  # the capture files are written off the loop
        async with session.get(f"http://{admin}/ui/gaps") as page:
            assert page.status == 200
            html = await page.text()
    assert "took too long" in html
    drafts = tmp_path / "drafts.yaml"
    argv = ["suggest", "--from", str(captures), "--config", str(config), "--out", str(drafts)]
    assert await asyncio.to_thread(main, argv) == 0
    said = capsys.readouterr().out
    assert "took too long" in said
    rules = {
        rule["match"]["status"][0]: rule for rule in yaml.safe_load(drafts.read_text())["rules"]
    }
    assert rules[404]["error"]["code"] == "ITEM_NOT_FOUND"
    assert rules[404]["match"]["json"]["path"] == "message"
    assert set(rules[400]["match"]) == {"routes", "status", "path"}  # no words: status and path
    assert rules[400]["match"]["path"] == "/rows"
