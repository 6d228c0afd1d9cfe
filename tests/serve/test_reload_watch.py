"""Reload that never goes stale, in a real `mendpoint serve` process: a reload that failed
on a new `include:` file (missing, or broken) leaves that file watched, so fixing it reloads
without touching the config; `GET /config` on the admin listener says which generation
runs, since when, the files watched and the last reload's error, behind the admin token."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.serve import workers
from tests.support.gateway import (
    StartUpstream,
    slow_gone_app,
    start_process,
    stop_process,
    supervised,
    wait_ready,
)
from tests.support.ports import free_port
from tests.support.secrets import write_secret
from tests.support.waits import patience

TOKEN = "admin-token-0123456789abcdef"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def gone_rule(code: str) -> dict[str, Any]:
    return {
        "rules": [
            {
                "id": code.lower(),
                "match": {"status": [410]},
                "error": {"code": code, "category": "NOT_FOUND"},
            }
        ]
    }


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data))


async def code_of(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        body = await response.json()
    return str(body["error"]["code"])


async def until_code(session: aiohttp.ClientSession, url: str, code: str) -> None:
    deadline = time.monotonic() + patience(10)
    seen = ""
    while time.monotonic() < deadline:
        seen = await code_of(session, url)
        if seen == code:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"still {seen}, never {code}: the fixed file was not reloaded")


async def until_logged(process: asyncio.subprocess.Process, text: str) -> str:
    """Read the process's stderr until a line holds `text`; all read so far."""
    assert process.stderr is not None
    read = ""
    deadline = time.monotonic() + patience(10)
    while text not in read:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} in the log:\n{read}"
        line = await asyncio.wait_for(process.stderr.readline(), left)
        assert line, f"the process ended without {text!r}:\n{read}"
        read += line.decode(errors="replace")
    return read


@pytest.mark.parametrize("broken", ["missing", "invalid"])
async def test_fixing_the_include_that_broke_a_reload_reloads(
    start_upstream: StartUpstream, tmp_path: Path, broken: str
) -> None:
    upstream = await start_upstream(slow_gone_app())
    port, admin = free_port(), free_port()
    config: dict[str, Any] = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [{"name": "api", "upstream": upstream}],
        "include": ["first.yaml"],
    }
    path, first, second = (tmp_path / f"{n}.yaml" for n in ("gateway", "first", "second"))
    write_yaml(first, gone_rule("FIRST"))
    write_yaml(path, config)
    url = f"http://127.0.0.1:{port}/thing"
    process = await start_process("serve", "--config", str(path))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz", process)
            assert await code_of(session, url) == "FIRST"
            if broken == "invalid":
                second.write_text("rules: [\n")  # a YAML error
            config["include"] = ["second.yaml", "first.yaml"]
            write_yaml(path, config)
            await until_logged(process, "config reload failed")
            assert await code_of(session, url) == "FIRST"  # the running config stays
            # Only the include is fixed; the config file is not touched again.
            write_yaml(second, gone_rule("SECOND"))
            await until_code(session, url, "SECOND")
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr


async def test_get_config_says_what_runs_and_why_a_reload_failed(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(slow_gone_app())
    port, admin = free_port(), free_port()
    token_file = tmp_path / "admin.token"
    write_secret(token_file, TOKEN + "\n")
    config: dict[str, Any] = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "admin_token_file": "admin.token",
        "routes": [{"name": "api", "upstream": upstream}],
        "include": ["first.yaml"],
    }
    path, first, second = (tmp_path / f"{n}.yaml" for n in ("gateway", "first", "second"))
    write_yaml(first, gone_rule("FIRST"))
    write_yaml(path, config)
    status_url = f"http://127.0.0.1:{admin}/config"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    process = await start_process("serve", "--config", str(path))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz", process)
            async with session.get(status_url) as refused:
                assert refused.status == 401  # token-protected like /gaps
            async with session.get(status_url, headers=auth) as response:
                assert response.status == 200
                started = await response.json()
            assert started["generation"] == 1 and started["last_error"] is None
            assert RFC3339.match(started["loaded_at"]), started
            assert started["files"] == [str(path), str(token_file), str(first)]

            second.write_text("rules:\n  - id: x\n    match: {status: [999]}\n")
            config["include"] = ["first.yaml", "second.yaml"]
            write_yaml(path, config)
            failed = await until_status(session, status_url, auth, lambda s: s["last_error"])
            assert failed["generation"] == 1 and failed["loaded_at"] == started["loaded_at"]
            assert failed["files"] == [str(path), str(token_file), str(first), str(second)]
            error = failed["last_error"]
            assert RFC3339.match(error["at"]) and error["at"] >= started["loaded_at"]
            assert f"{second}:2: rules[0].error" in error["message"], error  # as check says

            write_yaml(second, gone_rule("SECOND"))
            fixed = await until_status(session, status_url, auth, lambda s: s["generation"] == 2)
            assert fixed["last_error"] is None and fixed["loaded_at"] > started["loaded_at"]
            assert TOKEN not in json_text(started, failed, fixed)  # paths, never a secret
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr


async def until_status(
    session: aiohttp.ClientSession, url: str, auth: dict[str, str], done: Any
) -> dict[str, Any]:
    deadline = time.monotonic() + patience(10)
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        async with session.get(url, headers=auth) as response:
            status = await response.json()
        if done(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"/config never changed as expected: {status}")


def json_text(*answers: dict[str, Any]) -> str:
    return yaml.safe_dump(list(answers))


@pytest.mark.skipif(not workers.supported(), reason="--workers needs Linux")
async def test_under_workers_the_supervisor_and_every_worker_watch_the_broken_include(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(slow_gone_app())
    port, admin = free_port(), free_port()
    config: dict[str, Any] = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [{"name": "api", "upstream": upstream}],
        "include": ["first.yaml"],
    }
    path, first, second = (tmp_path / f"{n}.yaml" for n in ("gateway", "first", "second"))
    write_yaml(first, gone_rule("FIRST"))
    write_yaml(path, config)
    status_url, url = f"http://127.0.0.1:{admin}/config", f"http://127.0.0.1:{port}/thing"
    async with supervised(path, f"127.0.0.1:{admin}", tmp_path), aiohttp.ClientSession() as session:
        config["include"] = ["second.yaml", "first.yaml"]
        write_yaml(path, config)
        failed = await until_status(session, status_url, {}, lambda s: s["last_error"])
        assert str(second) in failed["files"] and failed["generation"] == 1
        write_yaml(second, gone_rule("SECOND"))
        fixed = await until_status(session, status_url, {}, lambda s: s["generation"] == 2)
        assert fixed["last_error"] is None
        deadline, in_a_row = time.monotonic() + patience(15), 0
        while in_a_row < 16:  # a fresh connection each: the kernel spreads them over workers
            assert time.monotonic() < deadline, "a worker kept the old config"
            async with aiohttp.ClientSession() as fresh:
                code = await code_of(fresh, url)
            in_a_row = in_a_row + 1 if code == "SECOND" else 0
