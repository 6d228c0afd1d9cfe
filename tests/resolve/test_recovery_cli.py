"""Recovery from the operator's side: catalog and caller validation, `explain --caller`,
and `mendpoint resolver` as a real subprocess serving sidecars."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from gateway.config.errors import ConfigError
from gateway.config.loader import load_catalog, load_config
from tests.support.paths import REPO
from tests.support.ports import free_port

ROOT = REPO
EXAMPLE = ROOT / "examples" / "gateway.yaml"
HEAD = "routes:\n  - name: api\n    upstream: http://127.0.0.1:9\n"  # lines 1-3
SKILL = (
    "  - name: s.one\n"
    "    version: 1.0.0\n"
    "    recovers: [fix_it]\n"
    "    repair: inspect\n"
    "    purpose: p\n"
)


def problems_of(tmp_path: Path, text: str, extra: dict[str, str] | None = None) -> str:
    for name, content in (extra or {}).items():
        (tmp_path / name).write_text(content)
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            HEAD + "skills:\n" + SKILL.replace("recovers: [fix_it]", "recovers: []"),
            "gateway.yaml:7: skills[0].recovers: List should have at least 1 item",
        ),
        (
            HEAD + "skills:\n" + SKILL.replace("    recovers: [fix_it]\n", ""),
            "gateway.yaml:5: skills[0].recovers: Field required",
        ),
        (
            HEAD + "skills:\n" + SKILL.replace("repair: inspect", "repair: magic"),
            "gateway.yaml:8: skills[0].repair: Input should be 'inspect'",
        ),
        (
            HEAD + "skills:\n" + SKILL + SKILL,
            "gateway.yaml:10: skills[1].name: skill 's.one' already defined at",
        ),
        (
            HEAD + "skills:\n" + SKILL + "policies:\n  - allow: {intent: fix_it, skills: [nope]}\n",
            "gateway.yaml:11: policies[0].allow.skills[0]: no skill is named 'nope'",
        ),
        (
            HEAD + "skills:\n" + SKILL + "policies:\n  - allow: {intent: other, skills: [s.one]}\n",
            "skill 's.one' does not declare intent 'other'",
        ),
        (
            HEAD + "callers:\n  keys:\n    - {name: a, key: 'abc'}\n",
            "gateway.yaml:6: callers.keys[0].key: String should match pattern",
        ),
        (
            HEAD
            + "callers:\n  source: trusted_header\n  keys:\n    - {name: a, key: 'sha256:"
            + "0" * 64
            + "'}\n",
            "API keys are only used with source: api_key",
        ),
        (HEAD + "callers:\n  keys_file: missing.yaml\n", "missing.yaml: cannot read"),
        (HEAD + "resolver: {url: 'ftp://x/resolve'}\n", "gateway.yaml:4: resolver.url"),
        (
            HEAD + "rules:\n  - id: r\n    match: {status: [400]}\n    error: {code: X, category:"
            " NOT_FOUND, recovery_intent: 'Not An Intent'}\n",
            "gateway.yaml:7: rules[0].error.recovery_intent",
        ),
    ],
    ids=[
        "empty-recovers",
        "no-recovers",
        "bad-repair",
        "duplicate-skill",
        "policy-unknown-skill",
        "policy-undeclared-intent",
        "key-not-a-hash",
        "keys-with-trusted-header",
        "missing-keys-file",
        "resolver-url",
        "malformed-intent",
    ],
)
def test_catalog_and_caller_problems(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in problems_of(tmp_path, text)


def test_keys_file_is_merged_and_duplicates_refused(tmp_path: Path) -> None:
    digest = "sha256:" + hashlib.sha256(b"k").hexdigest()
    (tmp_path / "keys.yaml").write_text(f"keys:\n  - {{name: b, key: '{digest}'}}\n")
    (tmp_path / "gateway.yaml").write_text(
        HEAD
        + "callers:\n  keys_file: keys.yaml\n  keys:\n    - {name: a, key: 'sha256:"
        + "1" * 64
        + "'}\n"
    )
    loaded = load_config(str(tmp_path / "gateway.yaml"))
    assert loaded.callers is not None
    assert [k.name for k in loaded.callers.keys] == ["a", "b"]
    assert str(tmp_path / "keys.yaml") in loaded.files
    clash = problems_of(
        tmp_path,
        HEAD + f"callers:\n  keys_file: keys.yaml\n  keys:\n    - {{name: b, key: '{digest}'}}\n",
    )
    assert "keys.yaml:2: keys[0]: caller name or key hash already defined" in clash


def test_a_bare_pack_is_a_catalog(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("skills:\n" + SKILL)
    loaded = load_catalog(str(path))
    assert [s.name for s in loaded.skills] == ["s.one"]
    path.write_text("skills:\n" + SKILL.replace("repair: inspect", "repair: nope"))
    with pytest.raises(ConfigError, match=r"catalog.yaml:5: skills\[0\].repair"):
        load_catalog(str(path))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ},
    )


def test_explain_with_a_caller_shows_options_and_operator_reasons(tmp_path: Path) -> None:
    body = tmp_path / "csv.json"
    body.write_text('{"error": "Row at line 2 has 4 columns, expected 3"}')
    common = (
        "explain",
        "--config",
        str(EXAMPLE),
        "--status",
        "400",
        "--body",
        str(body),
        "--method",
        "POST",
        "--path",
        "/v1/csv/normalize",
    )
    reader = run(*common, "--caller", "reader")
    guest = run(*common, "--caller", "guest")
    nobody = run(*common, "--caller", "nobody")
    assert reader.returncode == 0, reader.stderr
    assert '"skill_name": "schema.infer_csv_schema"' in reader.stdout
    assert "operator note" not in reader.stdout
    assert guest.returncode == 0
    assert '"available": false' in guest.stdout
    assert "not offered: caller lacks scope(s) ['data:read']" in guest.stdout
    assert nobody.returncode == 2 and "no caller named 'nobody'" in nobody.stderr


async def test_resolver_command_serves_the_catalog(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("skills:\n" + SKILL.replace("purpose: p", "purpose: Fixes it"))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "resolver",
        "--config",
        str(catalog),
        "--listen",
        f"127.0.0.1:{port}",
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        banner = await asyncio.wait_for(process.stderr.readline(), 20)
        assert b"listening on" in banner
        request = {
            "failure": {"category": "VALIDATION_ERROR", "code": "X", "intent": "fix_it"},
            "caller": {"scopes": []},
            "context": {"operation": "POST /x"},
        }
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                try:
                    async with session.post(
                        f"http://127.0.0.1:{port}/v1/resolve", json=request
                    ) as response:
                        answer = await response.json()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        assert answer["options"] == [
            {
                "rank": 1,
                "skill_name": "s.one",
                "skill_version": "1.0.0",
                "purpose": "Fixes it",
                "then_retry": {"skill_name": "POST /x", "advisory": True},
            }
        ]
        assert answer["catalog_version"].startswith("sha256:")
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
