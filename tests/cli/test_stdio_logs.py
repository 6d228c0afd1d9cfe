"""`mendpoint stdio` logs on stderr in the lines `serve` writes (docs/operations.md#logs): JSON
by default, with the same keys first, the format and level chosen the same way. stdout is the
protocol's; the server's own stderr passes through as it wrote it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.stdio_command import early_log
from gateway.telemetry.log_lines import chosen
from tests.support.mcp import INIT, INITIALIZED, call
from tests.support.paths import MCP_SERVERS, REPO
from tests.support.ports import free_port
from tests.support.waits import patience

SDK_SERVER = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
HEAD = ["ts", "level", "logger", "msg"]
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def stdio_stderr(tmp_path: Path, *options: str) -> list[str]:
    """A session whose one tool call fails (the SDK server's read_note of a missing note); the
    relay's stderr, line by line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "stdio", *options, "--", *SDK_SERVER],
        cwd=tmp_path,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    messages = [INIT, INITIALIZED, call(1, "read_note", {"name": "nope"})]
    process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    process.stdin.flush()
    try:
        while (line := process.stdout.readline()) and json.loads(line).get("id") != 1:
            pass
        assert line, "the session ended before answering the call"
        _, stderr = process.communicate(timeout=patience(30))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    return stderr.decode().splitlines()


def serve_first_line(tmp_path: Path) -> dict[str, Any]:
    """The line a `serve` process logs when it listens, parsed."""
    listen = f"127.0.0.1:{free_port()}"
    serve = ["serve", "--upstream", "http://127.0.0.1:9", "--listen", listen, "--admin", "off"]
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", *serve],
        cwd=tmp_path,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    deadline = time.monotonic() + patience(30)
    try:
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            assert line, "serve exited before listening"
            if "mendpoint listening" in line:
                parsed: dict[str, Any] = json.loads(line)
                return parsed
        raise AssertionError("serve did not listen")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=patience(15))


def test_a_stdio_sessions_log_line_is_the_json_serve_writes(tmp_path: Path) -> None:
    lines = stdio_stderr(tmp_path)  # no flag, variable or config: the defaults, as serve's
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    (failure,) = [entry for entry in logged if entry["logger"] == "mendpoint.mcp"]
    served = serve_first_line(tmp_path)
    assert list(failure)[:4] == list(served)[:4] == HEAD
    assert STAMP.fullmatch(failure["ts"]) and STAMP.fullmatch(served["ts"])
    assert failure["level"] == served["level"] == "info"
    assert failure["msg"].startswith("MCP failure FILE_NOT_FOUND")
    fields = {key: failure[key] for key in ("method", "tool", "code", "rule")}
    assert fields == {
        "method": "tools/call",
        "tool": "read_note",
        "code": "FILE_NOT_FOUND",
        "rule": "mcp-enoent",
    }
    assert re.fullmatch(r"[0-9a-f]{32}", failure["request_id"])
    # Only the server's own lines are not the gateway's JSON: none of them names our logger.
    assert not [line for line in lines if not line.startswith("{") and "mendpoint." in line]


def test_the_configs_log_block_and_the_environment_choose_as_for_serve(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        'routes:\n  - {name: api, upstream: "http://127.0.0.1:9"}\nlog: {format: text}\n'
    )
    lines = stdio_stderr(tmp_path, "--config", str(config))
    (failure,) = [line for line in lines if " mendpoint.mcp: " in line]
    assert STAMP.match(failure)
    assert " INFO mendpoint.mcp: MCP failure FILE_NOT_FOUND " in failure
    assert failure.endswith(" tool=read_note code=FILE_NOT_FOUND rule=mcp-enoent")


@pytest.mark.parametrize(
    ("flag", "env", "config", "expected"),
    [
        (None, {}, (None, None), ("info", "json")),
        (None, {}, ("warning", "text"), ("warning", "text")),
        (None, {"MENDPOINT_LOG_LEVEL": "error"}, ("warning", "text"), ("error", "text")),
        (None, {"MENDPOINT_LOG_FORMAT": "json"}, ("warning", "text"), ("warning", "json")),
        ("debug", {"MENDPOINT_LOG_LEVEL": "error"}, ("warning", None), ("debug", "json")),
    ],
    ids=["defaults", "config", "env-level", "env-format", "flag"],
)
def test_flags_win_over_the_environment_over_the_config(
    flag: str | None,
    env: dict[str, str],
    config: tuple[str | None, str | None],
    expected: tuple[str, str],
) -> None:
    assert chosen(flag, *config, env=env) == expected


def test_a_bad_format_variable_is_refused() -> None:
    with pytest.raises(ValueError, match="MENDPOINT_LOG_FORMAT must be json or text"):
        chosen(None, None, None, env={"MENDPOINT_LOG_FORMAT": "xml"})
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "stdio", "--", sys.executable, "-c", "input()"],
        env={**ENV, "MENDPOINT_LOG_FORMAT": "xml"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=patience(30),
    )
    assert done.returncode == 2
    assert done.stderr == "mendpoint stdio: MENDPOINT_LOG_FORMAT must be json or text\n"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"log": {"level": "debug", "format": "text"}}, ("debug", "text")),
        ({"log": {"level": "loud", "format": 3}}, (None, None)),  # the model's to refuse
        ({"log": "text"}, (None, None)),
        ([], (None, None)),
    ],
    ids=["set", "invalid", "not-a-block", "not-a-mapping"],
)
def test_the_log_block_read_before_the_models_load(data: object, expected: object) -> None:
    assert early_log(data) == expected
