"""`mendpoint check` reports every problem of every stage at once, sorted by file and line;
`explain … | head` ends quietly; a gateway without a catalog reports no catalog gaps."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from aiohttp import web

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.telemetry.metrics import REGISTRY
from tests.support.gateway import StartGateway, StartUpstream, route_config
from tests.support.paths import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO)}

CONFIG = textwrap.dedent(
    """\
    routes:
      - name: api
        upstream: http://127.0.0.1:9
        colour: blue
    include: [pack.yaml, broken.yaml]
    rules:
      - id: inline-bad-status
        match: {status: ["6xx"]}
        error: {code: A, category: VALIDATION_ERROR}
      - id: inline-unknown-command
        match: {status: [409]}
        error: {code: B, category: CONFLICT, fix_required: x, fix_command: nope}
    """
)
PACK = textwrap.dedent(
    """\
    rules:
      - id: pack-bad-regex
        match: {status: [400], body: "("}
        error: {code: C, category: VALIDATION_ERROR}
      - id: pack-typo
        match: {status: [400]}
        eror: {code: D}
      - id: pack-retry-without-retryable
        match: {status: [429]}
        error: {code: E, category: RATE_LIMITED, retry_after_ms: 5}
    """
)
BROKEN = "rules: [\n"


def write_all(tmp_path: Path) -> Path:
    (tmp_path / "pack.yaml").write_text(PACK)
    (tmp_path / "broken.yaml").write_text(BROKEN)
    path = tmp_path / "gw.yaml"
    path.write_text(CONFIG)
    return path


def test_every_stage_reports_at_once_sorted_by_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(str(write_all(tmp_path)))
    found = [(Path(p.file).name, p.line, p.field) for p in caught.value.problems]
    assert found == [
        ("broken.yaml", 2, ""),  # cannot be parsed: reported, and the rest still checked
        ("gw.yaml", 4, "routes[0].colour"),  # the config's own model
        ("gw.yaml", 8, "rules[0].match.status[0]"),  # whole-config checks, despite the above
        ("gw.yaml", 12, "rules[1].error.fix_command"),
        ("pack.yaml", 3, "rules[0].match.body"),  # an included pack's checks ...
        ("pack.yaml", 5, "rules[1].error"),  # ... and its model
        ("pack.yaml", 7, "rules[1].eror"),
        ("pack.yaml", 10, "rules[2].error.retry_after_ms"),
    ]
    assert not any("x-mendpoint-invalid" in str(p) for p in caught.value.problems)


def test_a_stand_in_never_adds_a_problem_of_its_own(tmp_path: Path) -> None:
    """An invalid route, rule and command are reported once each, with no knock-on problems."""
    path = tmp_path / "gw.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            companions: [tool]
            routes:
              - {name: api, upstream: "ftp://nowhere"}
            commands:
              refresh: {run: 5, idempotent: true}
            rules:
              - id: uses-route-and-command
                match: {routes: [api], status: [401]}
                error: {code: A, category: AUTH_REQUIRED, fix_required: x, fix_command: refresh}
              - id: bad
                match: {status: [400]}
                error: {code: lower, category: VALIDATION_ERROR}
            """
        )
    )
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert [p.field for p in caught.value.problems] == [
        "routes[0].upstream",
        "commands.refresh.run",
        "rules[1].error.code",
    ]


def test_check_prints_them_all(tmp_path: Path) -> None:
    write_all(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--config", "gw.yaml"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) >= 7
    assert lines[0].startswith("broken.yaml:2: ")
    assert any("pack.yaml:3: rules[0].match.body" in line for line in lines)
    assert any("routes[0].colour" in line for line in lines)


def test_explain_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`mendpoint explain … | head -0`: the reader is gone before the first write."""
    command = [sys.executable, "-m", "gateway", "explain", "--upstream", "http://127.0.0.1:9"]
    with subprocess.Popen(
        [*command, "--status", "503", "--method", "POST"],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        err = process.stderr.read().decode()
        assert process.wait(timeout=30) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_explain_into_head_that_stops_reading_ends_quietly(tmp_path: Path) -> None:
    """`mendpoint explain … | head -c 100` through a real pipe: the output is larger than the
    pipe holds, so head exits while explain is still writing."""
    body = tmp_path / "big.json"
    body.write_text(json.dumps({"message": "x" * 200_000, "rows": [1] * 50_000}))
    command = [sys.executable, "-m", "gateway", "explain", "--upstream", "http://127.0.0.1:9"]
    explain = subprocess.Popen(
        [*command, "--status", "500", "--body", str(body), "--mode", "envelope"],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert explain.stdout is not None and explain.stderr is not None
    head = subprocess.run(
        ["head", "-c", "100"], stdin=explain.stdout, capture_output=True, timeout=30, check=True
    )
    explain.stdout.close()  # only head holds the read end now: when it exits, nobody does
    err = explain.stderr.read().decode()
    assert explain.wait(timeout=30) == 0, err
    explain.stderr.close()
    assert len(head.stdout) == 100
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def gaps() -> float:
    labels = {"intent": "credential_refresh"}
    return REGISTRY.get_sample_value("mendpoint_resolver_catalog_gap_total", labels) or 0.0


async def test_no_catalog_gaps_without_a_catalog(
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def unauthorized(request: web.Request) -> web.Response:
        return web.json_response({"message": "log in"}, status=401)

    app = web.Application()
    app.router.add_get("/me", unauthorized)
    upstream = await start_upstream(app)
    caplog.set_level(logging.WARNING)
    plain = await start_gateway(route_config(upstream))  # no skills: no catalog
    before = gaps()
    async with await plain.request("GET", "/me") as answer:
        assert answer.headers["X-Error-Code"] == "AUTH_REQUIRED"  # intent credential_refresh
    assert gaps() == before
    assert "catalog gap" not in caplog.text
    skill = {
        "name": "csv.sniff",
        "version": "1",
        "recovers": ["format_inspection"],
        "repair": "inspect",
        "purpose": "p",
    }
    with_catalog = await start_gateway({**route_config(upstream), "skills": [skill]})
    async with await with_catalog.request("GET", "/me") as answer:
        assert answer.status == 401
    assert gaps() == before + 1
    assert "catalog gap" in caplog.text


def test_explain_takes_the_callers_headers(tmp_path: Path) -> None:
    """`--request-header Idempotency-Key:…` shows what the key changes for a POST's 503."""
    base = [sys.executable, "-m", "gateway", "explain", "--upstream", "http://127.0.0.1:9"]
    base += ["--status", "503", "--method", "POST"]
    plain, keyed = (
        subprocess.run(
            base + extra, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=30
        )
        for extra in ([], ["--request-header", "Idempotency-Key:order-7"])
    )
    assert "header: X-Error-Retryable: false" in plain.stdout
    assert "rule:  http-503 " in plain.stdout
    assert "header: X-Error-Retryable: true" in keyed.stdout
    assert "rule:  http-503-idempotent " in keyed.stdout


def test_a_config_without_routes_still_has_its_packs_checked(tmp_path: Path) -> None:
    (tmp_path / "pack.yaml").write_text(PACK)
    path = tmp_path / "gw.yaml"
    path.write_text("include: [pack.yaml]\nlimits: {read_timeout_s: -1}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    found = [(Path(p.file).name, p.field) for p in caught.value.problems]
    assert ("gw.yaml", "routes") in found
    assert ("gw.yaml", "limits.read_timeout_s") in found
    assert ("pack.yaml", "rules[0].match.body") in found
    assert ("pack.yaml", "rules[2].error.retry_after_ms") in found
