"""The `mendpoint` command as a user runs it (docs/operations.md): real subprocesses and exit codes.

`check`, `explain` and `test` exit 0 on success, 1 on an invalid config or a failing fixture
(every config problem printed as `FILE:LINE: …`, never a traceback) and 2 on a usage error;
`serve` proxies to a real upstream and exits 0 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.cli import main
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.waits import patience

ROOT = REPO
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

StartUpstream = Callable[[web.Application], Awaitable[str]]

CONFIG = textwrap.dedent(
    r"""
    routes:
      - name: api
        upstream: http://127.0.0.1:9
    commands:
      auth_refresh: {run: "demo-cli auth refresh", idempotent: true}
    rules:
      - id: csv-malformed
        match:
          status: [400]
          methods: [POST]
          headers: {content-type: json}
          json: {path: error.message, regex: "Row at line (?P<line>\\d+) has (?P<got>\\d+) columns"}
        error:
          code: CSV_MALFORMED
          category: VALIDATION_ERROR
          message: "Row {line} has {got} columns"
          fix_required: "Make row {line} match the header, then reissue"
      - id: token-expired
        match: {status: [401]}
        error:
          code: CREDENTIALS_EXPIRED
          category: AUTH_REQUIRED
          fix_required: "Refresh credentials, then reissue"
          fix_command: auth_refresh
    """
).lstrip()

BAD_CONFIG = textwrap.dedent(
    """\
    routes:
      - name: api
        upstream: http://127.0.0.1:9
    rules:
      - id: r1
        match: {status: ["6xx"]}
        error:
          code: X
          category: UNAVAILABLE
          retryable: true
    """
)

FIXTURES = textwrap.dedent(
    """\
    cases:
      - name: csv-row
        request: {method: POST, path: /v1/upload}
        response:
          status: 400
          headers: {Content-Type: application/json}
          json: {error: {message: "Row at line 7 has 3 columns"}}
        expect:
          rule: csv-malformed
          code: CSV_MALFORMED
          message: "Row 7 has 3 columns"
          fix_required: "Make row 7 match the header, then reissue"
          retryable: false
      - name: expired
        response: {status: 401}
        expect: {rule: token-expired, fix_command: demo-cli auth refresh, recoverable: true}
      - name: refused
        transport: connect_refused
        expect: {rule: transport-unreachable, category: UNAVAILABLE, retryable: true}
    """
)

LOCATED = re.compile(r"^\S+:\d+: ")


def mendpoint(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m gateway ARGS` as a real subprocess, as a user or a CI job runs it."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        env=ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """`main(args)` in this process, in tmp_path: for the variants a subprocess each would slow."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def _envelope(stdout: str) -> dict[str, Any]:
    """The JSON body `explain` prints after its `route:`/`rule:`/`header:` lines."""
    start = stdout.index("\n{") + 1
    body: dict[str, Any] = json.loads(stdout[start:])
    return body


# --- check ---------------------------------------------------------------------------------


def test_check_good_config(config: Path) -> None:
    result = mendpoint("check", "--config", config.name, cwd=config.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("gateway.yaml: OK")
    assert "1 route(s)" in result.stdout
    assert "1 command(s)" in result.stdout


def test_check_lists_every_rule_file_in_match_order(tmp_path: Path, cli: Run) -> None:
    """What a config includes, in the order rules are tried: its own, its includes, the
    shipped stack packs, the fallbacks last."""
    (tmp_path / "mine.yaml").write_text(
        "rules:\n  - id: mine\n    match: {status: [418]}\n"
        "    error: {code: TEAPOT, category: UPSTREAM_ERROR}\n",
        encoding="utf-8",
    )
    (tmp_path / "gateway.yaml").write_text(
        "include: [mine.yaml]\nroutes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n",
        encoding="utf-8",
    )
    code, out, _ = cli("check", "--config", "gateway.yaml")
    assert code == 0
    listed = [line.rsplit(": ", 1)[0].strip() for line in out.splitlines() if line.startswith("  ")]
    assert listed[:2] == ["gateway.yaml", "mine.yaml"]
    assert "builtin:fastapi" in listed
    assert listed[-2:] == ["builtin:http-defaults", "builtin:mcp-defaults"]
    assert "  mine.yaml: 1 rule(s)" in out


def test_check_bad_config_prints_every_located_problem(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(BAD_CONFIG, encoding="utf-8")
    result = mendpoint("check", "--config", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert all(LOCATED.match(line) for line in lines), lines
    assert [line.split(": ", 2)[:2] for line in lines] == [
        ["bad.yaml:6", "rules[0].match.status[0]"],
        ["bad.yaml:10", "rules[0].error.retryable"],
    ]


def test_check_unknown_key(tmp_path: Path, cli: Run) -> None:
    (tmp_path / "bad.yaml").write_text(BAD_CONFIG + "      fix_comand: nope\n", encoding="utf-8")
    code, out, err = cli("check", "--config", "bad.yaml")
    assert (code, out) == (1, "")
    assert err == (
        "bad.yaml:11: rules[0].error.fix_comand: unknown key: did you mean `fix_command`?\n"
    )


def test_check_missing_file(tmp_path: Path) -> None:
    result = mendpoint("check", "--config", "absent.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == "absent.yaml: cannot read: No such file or directory"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"routes: !!int x\n", "bad.yaml:1: routes: invalid value"),
        (b"routes:\n  - name: \x01\n", "bad.yaml:2: invalid YAML: unacceptable character"),
        (b"routes: \xff\n", "bad.yaml:1: not UTF-8 text"),
        (b"a: " + b"[" * 500 + b"]" * 500, "bad.yaml:1: invalid YAML: nested deeper than 64"),
    ],
    ids=["bad-tag", "control-character", "not-utf8", "too-deep"],
)
def test_check_hostile_yaml_is_a_located_problem(
    tmp_path: Path, cli: Run, text: bytes, expected: str
) -> None:
    (tmp_path / "bad.yaml").write_bytes(text)
    code, _, err = cli("check", "--config", "bad.yaml")
    assert code == 1
    assert err.startswith(expected)
    assert len(err.splitlines()) == 1


# --- explain -------------------------------------------------------------------------------


def test_explain_status_with_body_and_headers(config: Path) -> None:
    body = config.parent / "body.json"
    body.write_text('{"error": {"message": "Row at line 7 has 3 columns"}}', encoding="utf-8")
    result = mendpoint(
        "explain",
        "--config",
        str(config),
        "--status",
        "400",
        "--body",
        str(body),
        "--method",
        "POST",
        "--path",
        "/x",
        "--header",
        "Content-Type:application/json",
        cwd=config.parent,
    )
    assert result.returncode == 0, result.stderr
    assert "route: api\n" in result.stdout
    assert f"rule:  csv-malformed ({config}:7)" in result.stdout
    assert "header: X-Error-Code: CSV_MALFORMED" in result.stdout
    envelope = _envelope(result.stdout)
    assert envelope["error"]["code"] == "CSV_MALFORMED"
    assert envelope["error"]["message"] == "Row 7 has 3 columns"
    assert envelope["error"]["fix_required"] == "Make row 7 match the header, then reissue"
    assert envelope["error"]["retryable"] is False
    assert envelope["failure"]["category"] == "VALIDATION_ERROR"
    assert envelope["meta"]["exit_code"] == 2


def test_explain_body_from_stdin_and_method_matters(config: Path, cli: Run) -> None:
    """The same sample sent as GET does not match the POST-only rule: the default catches it."""
    args = ["explain", "--config", str(config), "--status", "400", "--body", "-"]
    args += ["--header", "Content-Type: application/json"]
    sample = b'{"error": {"message": "Row at line 7 has 3 columns"}}'
    _, post, _ = cli(*args, "--method", "post", stdin=sample)
    _, get, _ = cli(*args, stdin=sample)
    assert "rule:  csv-malformed" in post
    assert _envelope(post)["error"]["message"] == "Row 7 has 3 columns"
    assert "rule:  http-400 (builtin:http-defaults:" in get
    assert "shipped default" in get


def test_explain_transport(config: Path) -> None:
    result = mendpoint(
        "explain", "--config", str(config), "--transport", "connect_refused", cwd=config.parent
    )
    assert result.returncode == 0, result.stderr
    assert "rule:  transport-unreachable (builtin:http-defaults:" in result.stdout
    envelope = _envelope(result.stdout)
    assert envelope["error"]["retryable"] is True
    assert envelope["error"]["retry_after_ms"] == 1000
    assert envelope["meta"]["transport"] == "connect_refused"


def test_explain_without_a_config_uses_the_embedded_default(cli: Run) -> None:
    code, out, err = cli("explain", "--status", "404", "--mode", "headers")
    assert code == 0, err
    assert out.startswith("route: default\nrule:  http-404 (builtin:http-defaults:")
    assert "header: X-Error-Code: NOT_FOUND" in out
    assert out.endswith("body: unchanged (the upstream's bytes)\n")


def test_explain_success_passes_through(config: Path, cli: Run) -> None:
    code, out, _ = cli("explain", "--config", str(config), "--status", "200")
    assert code == 0
    assert out == "route: api\nno rule matched: the response would pass through\n"


def test_explain_needs_a_status_or_a_transport(config: Path) -> None:
    result = mendpoint("explain", "--config", str(config), cwd=config.parent)
    assert result.returncode == 2
    assert result.stderr == "mendpoint explain: give exactly one of --status or --transport\n"
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--status", "500", "--transport", "reset"], "give exactly one of --status"),
        (["--status", "500", "--header", "nocolon"], "--header 'nocolon' must be NAME:VALUE"),
    ],
    ids=["both", "bad-header"],
)
def test_explain_usage_errors(config: Path, cli: Run, args: list[str], expected: str) -> None:
    code, out, err = cli("explain", "--config", str(config), *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"mendpoint explain: {expected}")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--body", "nope"], "mendpoint: [Errno 2] No such file or directory: 'nope'"),
        (["--path", "/elsewhere"], "mendpoint: no route's prefix matches '/elsewhere'"),
        (
            ["--path", "/v1/../admin"],
            "mendpoint: the gateway refuses '/v1/../admin' itself (400 UNSAFE_PATH): it "
            "leaves its route, or reads as another path (docs/transparency.md#paths)",
        ),
    ],
    ids=["missing-body-file", "no-route", "unsafe-path"],
)
def test_explain_bad_sample(tmp_path: Path, cli: Run, args: list[str], expected: str) -> None:
    (tmp_path / "one.yaml").write_text(
        "routes: [{name: v1, prefix: /v1, upstream: 'http://127.0.0.1:9'}]\n", encoding="utf-8"
    )
    code, _, err = cli("explain", "--config", "one.yaml", "--status", "500", *args)
    assert code == 1
    assert err == expected + "\n"


# --- test ------------------------------------------------------------------------------------


def test_fixtures_pass(config: Path) -> None:
    (config.parent / "cases.yaml").write_text(FIXTURES, encoding="utf-8")
    result = mendpoint("test", "--config", str(config), "cases.yaml", cwd=config.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "3 passed, 0 failed"


def test_a_wrong_expectation_fails(config: Path) -> None:
    wrong = FIXTURES.replace('message: "Row 7 has 3 columns"', 'message: "Row 8 has 3 columns"')
    (config.parent / "cases.yaml").write_text(wrong, encoding="utf-8")
    result = mendpoint("test", "--config", str(config), "cases.yaml", cwd=config.parent)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "FAIL cases.yaml: csv-row",
        "    message: expected 'Row 8 has 3 columns', got 'Row 7 has 3 columns'",
        "2 passed, 1 failed",
    ]


def test_shipped_fixtures_pass_against_the_embedded_default(cli: Run) -> None:
    code, out, _ = cli("test", "builtin:http-defaults")
    assert code == 0, out
    assert re.fullmatch(r"[1-9]\d* passed, 0 failed\n", out)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"cases: [\n", "cases.yaml:2: invalid YAML"),
        (b"cases:\n  - name: x\n    expect: {}\n", "cases.yaml:2: cases[0]:"),
        (b"\xff\n", "cases.yaml: not UTF-8 text"),
    ],
    ids=["yaml-syntax", "neither-response-nor-transport", "not-utf8"],
)
def test_bad_fixture_file(config: Path, cli: Run, text: bytes, expected: str) -> None:
    (config.parent / "cases.yaml").write_bytes(text)
    code, _, err = cli("test", "--config", str(config), "cases.yaml")
    assert code == 1
    assert err.startswith(expected)


# --- serve -----------------------------------------------------------------------------------


async def _upstream_app() -> web.Application:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello from upstream", headers={"X-Upstream": "yes"})

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read(), content_type="application/octet-stream")

    async def missing(request: web.Request) -> web.Response:
        return web.json_response({"message": "no such widget"}, status=404)

    app = web.Application()
    app.router.add_get("/hello", hello)
    app.router.add_post("/echo", echo)
    app.router.add_get("/widgets/1", missing)
    return app


async def _wait_listening(url: str, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + patience(20)
    async with aiohttp.ClientSession() as session:
        while True:
            assert process.returncode is None, "serve exited before listening"
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with session.get(url + "/hello") as response:
                    await response.read()
                    return
            assert time.monotonic() < deadline, "serve did not start listening"
            await asyncio.sleep(0.05)


async def test_serve_proxies_and_exits_cleanly_on_sigterm(
    tmp_path: Path, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(await _upstream_app())
    listen = f"127.0.0.1:{free_port()}"
    url = f"http://{listen}"
    with (tmp_path / "serve.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--upstream",
            upstream,
            "--listen",
            listen,
            "--admin",
            "off",  # the default admin port may be taken on a shared machine
            cwd=tmp_path,
            env=ENV,
            stdout=log,
            stderr=log,
        )
    try:
        await _wait_listening(url, process)
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/hello") as response:
                assert response.status == 200
                assert await response.text() == "hello from upstream"
                assert response.headers["X-Upstream"] == "yes"
                assert "X-Error-Code" not in response.headers
            async with session.post(url + "/echo", data=b"\x00payload\xff") as response:
                assert response.status == 200
                assert await response.read() == b"\x00payload\xff"
            async with session.get(url + "/widgets/1") as response:
                assert response.status == 404
                assert response.headers["X-Error-Code"] == "NOT_FOUND"
                body = await response.json()
                assert body["message"] == "no such widget"  # additive: the original stays
                assert body["error"]["code"] == "NOT_FOUND"
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    log_text = (tmp_path / "serve.log").read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in log_text
    assert f"mendpoint listening on {url}" in log_text


async def test_serve_mode_sets_the_embedded_defaults_mode(
    tmp_path: Path, start_upstream: StartUpstream
) -> None:
    """`serve --upstream URL --mode envelope`: the one route answers in that mode, over
    MENDPOINT_MODE (docs/operations.md#the-command)."""
    upstream = await start_upstream(await _upstream_app())
    url = f"http://127.0.0.1:{free_port()}"
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "serve", "--upstream", upstream, "--mode", "envelope"),
        *("--listen", url.removeprefix("http://"), "--admin", "off"),
        cwd=tmp_path,
        env={**ENV, "MENDPOINT_MODE": "headers"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _wait_listening(url, process)
        async with (
            aiohttp.ClientSession() as session,
            session.get(url + "/widgets/1") as response,
        ):
            assert response.status == 404
            body = await response.json()
        assert body["ok"] is False and body["error"]["code"] == "NOT_FOUND"
        assert body["meta"]["original"]["body"] == {"message": "no such widget"}
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=15)


def test_serve_mode_is_for_the_embedded_default_only(config: Path, cli: Run) -> None:
    code, _, err = cli("serve", "--config", str(config), "--mode", "envelope")
    assert code == 2
    assert err.startswith("mendpoint serve: --mode sets the embedded default's mode")
    assert "set each route's mode: in it" in err
    code, _, err = cli("serve", "--upstream", "http://127.0.0.1:9", "--mode", "loud")
    assert code == 2 and "invalid choice: 'loud'" in err


def test_serve_needs_a_config_or_an_upstream(tmp_path: Path) -> None:
    result = mendpoint("serve", cwd=tmp_path)
    assert result.returncode == 2
    assert "give --config FILE or --upstream URL" in result.stderr


def test_serve_refuses_a_bad_listen_address(cli: Run) -> None:
    code, _, err = cli("serve", "--upstream", "http://127.0.0.1:9", "--listen", "x")
    assert code == 2
    assert err.startswith("mendpoint serve: --listen: 'x' must be HOST:PORT")


def test_serve_refuses_a_bad_upstream(cli: Run) -> None:
    code, _, err = cli("serve", "--upstream", "ftp://h", "--listen", "127.0.0.1:0")
    assert code == 1
    assert err.startswith("<command line>: routes[0].upstream:")


def test_serve_with_a_bad_config_exits_1(tmp_path: Path, cli: Run) -> None:
    (tmp_path / "bad.yaml").write_text(BAD_CONFIG, encoding="utf-8")
    code, _, err = cli("serve", "--config", "bad.yaml")
    assert code == 1
    assert err.startswith("bad.yaml:6: rules[0].match.status[0]:")


def test_serve_config_and_upstream_are_exclusive(config: Path, cli: Run) -> None:
    code, _, err = cli("serve", "--config", str(config), "--upstream", "http://h:1")
    assert code == 2
    assert "not allowed with argument" in err


def test_building_the_parser_imports_no_model() -> None:
    """Every command builds the whole parser first; `mendpoint stdio` starts an MCP server per
    chat after it (docs/performance.md#mcp-start-up), so building it imports no pydantic."""
    code = (
        "import sys\n"
        "from gateway.cli.parser import build_parser\n"
        "build_parser().parse_args(['stdio', '--', 'true'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml', 'aiohttp')"
        " or m.startswith(('gateway.config.models', 'gateway.offline'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_schema_kinds_usage_names_every_kind() -> None:
    from gateway.cli.parser import _SchemaKinds
    from gateway.offline.schema import KINDS

    assert "{" + ",".join(sorted(KINDS)) + "}" == _SchemaKinds.METAVAR
