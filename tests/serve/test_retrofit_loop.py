"""The retrofit loop as a platform team runs it, end to end (docs/operations.md#the-rollout-loop):
a legacy API behind a real gateway process in `headers` mode with capture and an admin
token; its failures read from /gaps and `mendpoint gaps`; drafts from `mendpoint suggest`,
from /gaps and from the captures, that win their own samples (`mendpoint test` on fixtures
made of the real bodies, and `explain` on bodies fetched from the API itself); the gaps
closing when the drafts are included and the gateway reloads; the counts windowed and reset.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from multidict import CIMultiDict

from gateway.cli import main
from gateway.config.loader import load_config
from gateway.feedback.signatures import BUCKET_S
from gateway.offline.explain import Sample, explain
from tests.support.gateway import StartUpstream, supervised, write_config
from tests.support.legacy_api import legacy_app
from tests.support.ports import free_port
from tests.support.secrets import write_secret
from tests.support.waits import patience

TOKEN = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
# (method, path, times): each of the API's errors, its count its own.
TRAFFIC = [
    ("GET", "/accounts/me", 3),
    *(("GET", f"/accounts/{n}", 1) for n in range(11, 18)),
    ("POST", "/accounts", 2),
    ("POST", "/transfers", 4),
    ("GET", "/rates", 3),
    ("GET", "/reports/5", 1),
    ("GET", "/reports/6", 1),
    ("GET", "/status", 2),
    ("GET", "/audit", 3),
    ("GET", "/health", 5),
]
COUNTS = {"401": 3, "404": 7, "409": 2, "422": 4, "429": 3, "500": 2, "503": 2, "403": 3}
DRAFTED = {401, 403, 404, 409, 422, 500}
PATHS = {
    401: "/accounts/me",
    403: "/audit",
    404: "/accounts/*",
    409: "/accounts",
    422: "/transfers",
    500: "/reports/*",
}
# One request of each kind, asked of the API itself for `explain`.
ONE_EACH = [
    ("GET", "/accounts/me"),
    ("GET", "/accounts/99"),
    ("POST", "/accounts"),
    ("POST", "/transfers"),
    ("GET", "/rates"),
    ("GET", "/reports/77"),
    ("GET", "/status"),
    ("GET", "/audit"),
]


async def send_traffic(base: str) -> None:
    async with aiohttp.ClientSession() as session:
        for method, path, times in TRAFFIC:
            for _ in range(times):
                async with session.request(method, base + path, json={}) as answer:
                    await answer.read()


async def admin_call(admin: str, path: str, token: str | None = TOKEN, method: str = "GET") -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"http://{admin}{path}", headers=headers) as answer,
    ):
        return answer.status, await answer.json()


async def fetch(url: str) -> tuple[int, CIMultiDict[str]]:
    async with aiohttp.ClientSession() as session, session.get(url) as answer:
        await answer.read()
        return answer.status, CIMultiDict(answer.headers)


def rules_of(path: Path) -> dict[int, dict[str, Any]]:
    rules = yaml.safe_load(path.read_text())["rules"]
    return {rule["match"]["status"][0]: rule for rule in rules}


async def suggest(source: str, config: Path, out: Path, *more: str) -> None:
    argv = ["suggest", "--from", source, "--config", str(config), "--out", str(out), *more]
    assert await asyncio.to_thread(main, argv) == 0


async def passes_its_fixtures(
    tmp_path: Path, route: dict[str, Any], drafts: Path, capsys: pytest.CaptureFixture[str]
) -> Path:
    """`check` and `test` on a config that includes `drafts`; the config's path."""
    config = write_config(tmp_path, {"include": [str(drafts)], "routes": [route]}, "with.yaml")
    assert await asyncio.to_thread(main, ["check", "--config", str(config)]) == 0
    fixtures = drafts.parent / "fixtures" / f"{drafts.stem}.fixtures.yaml"
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["test", "--config", str(config), str(fixtures)])
    said = capsys.readouterr().out
    assert code == 0, said
    cases = yaml.safe_load(fixtures.read_text())["cases"]
    assert f"{len(cases)} passed, 0 failed" in said
    return config


async def explain_picks_the_drafts(upstream: str, config: Path, drafts: Path) -> None:
    """`explain`, on the bodies the API answers now, picks each draft for its own failure,
    and the shipped retryable rules for the 429 and the 503."""
    loaded = load_config(str(config))
    rules = rules_of(drafts)
    async with aiohttp.ClientSession() as session:
        for method, path in ONE_EACH:
            async with session.request(method, upstream + path, json={}) as answer:
                body = await answer.read()
                headers = CIMultiDict(answer.headers)
                status = answer.status
            sample = Sample(method=method, path=path, status=status, headers=headers, body=body)
            verdict = (await explain(loaded, sample)).verdict
            assert verdict is not None
            if status in DRAFTED:
                assert verdict.rule.id == rules[status]["id"], (path, verdict.rule.id)
            else:
                assert verdict.rule.is_default and verdict.rule.error.retryable, path


async def test_drafts_win_their_own_samples_and_their_gaps_close(
    start_upstream: StartUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = await start_upstream(legacy_app())
    captures = tmp_path / "captures"
    tokens = write_secret(tmp_path / "admin-token", TOKEN + "\n")
    admin, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    route = {"name": "api", "prefix": "/", "upstream": upstream, "mode": "headers"}
    running = {
        "listen": listen,
        "admin": admin,
        "admin_token_file": str(tokens),
        "routes": [{**route, "capture": {"dir": str(captures)}}],
    }
    config = write_config(tmp_path, running)
    async with supervised(config, admin, tmp_path, workers=None) as process:
        await send_traffic(f"http://{listen}")
        sent = time.time()

        # /gaps: every signature with its real count and a redacted sample; the 429 and the
        # 503 covered by the shipped retryable rules, and listed after the open ones.
        status, gaps = await admin_call(admin, "/gaps?limit=50")
        assert status == 200 and gaps["window_s"] == 900
        rows = gaps["signatures"]
        by_status = {row["status"]: row for row in rows}
        assert {s: row["count"] for s, row in by_status.items()} == COUNTS
        assert by_status["429"]["covered_by"] == "http-429"
        assert by_status["503"]["covered_by"].startswith("http-503")
        assert [row["status"] for row in rows[-2:]] in (["429", "503"], ["503", "429"])
        assert all(by_status[str(s)]["covered_by"] is None for s in DRAFTED)
        legacy = by_status["404"]["sample"]
        assert legacy["method"] == "GET" and legacy["path"].startswith("/accounts/1")
        assert json.loads(legacy["body"])["errorCode"] == "E1004"
        capsys.readouterr()
        argv = ["gaps", "--admin", admin, "--token-file", str(tokens)]
        assert await asyncio.to_thread(main, argv) == 0
        assert "[covered by http-429]" in capsys.readouterr().out

        # suggest from /gaps: drafts on real paths, with the signatures' counts.
        from_gaps = tmp_path / "gaps" / "drafts.yaml"
        from_gaps.parent.mkdir()
        await suggest(admin, config, from_gaps, "--token-file", str(tokens))
        text = from_gaps.read_text()
        rules = rules_of(from_gaps)
        assert set(rules) == DRAFTED
        assert {s: rules[s]["match"]["path"] for s in DRAFTED} == PATHS
        assert rules[404]["match"]["json"] == {"path": "errorCode", "regex": "^E1004$"}
        # The XML 403 is drafted on the code it states, not only on its message's words.
        assert rules[403]["error"]["code"] == "AUDIT_FORBIDDEN"
        assert rules[403]["match"]["body"] == "<code>AUDIT_FORBIDDEN</code>"
        assert rules[409]["error"]["code"] == "AN_ACCOUNT_WITH_THIS_EMAIL_ALREADY_EXISTS"
        assert rules[409]["match"]["json"]["path"] == "errMsg"
        for status_code in DRAFTED:
            assert f"# {COUNTS[str(status_code)]} failure(s), e.g." in text
        assert "covered by rule http-429" in text
        assert "propose: extra_message_paths: ['errMsg']" in text
        with_gaps = await passes_its_fixtures(tmp_path, route, from_gaps, capsys)
        cases = yaml.safe_load((from_gaps.parent / "fixtures" / "drafts.fixtures.yaml").read_text())
        bodies = {case["response"]["status"]: case["response"]["body"] for case in cases["cases"]}
        assert "The ledger backend did not answer report" in bodies[500]  # the real page
        await explain_picks_the_drafts(upstream, with_gaps, from_gaps)

        # suggest from the captures: the same drafts.
        from_dir = tmp_path / "dir" / "drafts.yaml"
        from_dir.parent.mkdir()
        await suggest(str(captures), config, from_dir)
        assert {s: r["match"] for s, r in rules_of(from_dir).items()} == {
            s: r["match"] for s, r in rules.items()
        }
        await passes_its_fixtures(tmp_path, route, from_dir, capsys)

        # The window: failures of a bucket gone by are outside a window of one bucket.
        await asyncio.sleep(BUCKET_S - sent % BUCKET_S + 0.2)
        _, recent = await admin_call(admin, f"/gaps?window_s={BUCKET_S}")
        assert recent["signatures"] == []
        assert (await fetch(f"http://{listen}/audit"))[0] == 403
        _, recent = await admin_call(admin, f"/gaps?window_s={BUCKET_S}")
        assert [(r["status"], r["count"]) for r in recent["signatures"]] == [("403", 1)]
        _, whole = await admin_call(admin, "/gaps?window_s=3600")
        assert {r["status"]: r["count"] for r in whole["signatures"]}["403"] == 4

        # The drafts included and the config reloaded: each gap is covered by its draft.
        config.write_text(yaml.safe_dump({**running, "include": [str(from_gaps)]}))
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + patience(15)
        while True:
            _, gaps = await admin_call(admin, "/gaps?limit=50")
            covered = {row["status"]: row["covered_by"] for row in gaps["signatures"]}
            if covered["404"] is not None:
                break
            assert time.monotonic() < deadline, "the reload never covered the gaps"
            await asyncio.sleep(0.2)
        assert {int(s): c for s, c in covered.items() if int(s) in DRAFTED} == {
            s: rules[s]["id"] for s in DRAFTED
        }
        assert covered["429"] == "http-429"
        _, answered = await fetch(f"http://{listen}/accounts/5")
        assert answered["X-Error-Code"] == "E1004"  # the draft answers now

        # A reset needs the token, and starts the counts afresh.
        status, _ = await admin_call(admin, "/gaps/reset", token=None, method="POST")
        assert status == 401
        status, done = await admin_call(admin, "/gaps/reset", method="POST")
        assert (status, done) == (200, {"reset": True, "scope": "process"})
        _, gaps = await admin_call(admin, "/gaps?window_s=3600")
        assert gaps["signatures"] == []
