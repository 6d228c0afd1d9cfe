"""`mendpoint stdio` with real servers: the official SDK's client and server, and the npm
filesystem and everything servers. Errors come back upgraded; successes byte for byte."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS
from tests.support.waits import patience

SERVERS = MCP_SERVERS
BIN = SERVERS / "node_modules" / ".bin"
SDK_SERVER = [sys.executable, str(SERVERS / "sdk_server.py"), "stdio"]
MENDPOINT = [sys.executable, "-m", "gateway", "--log-level", "warning", "stdio", "--"]
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def npm_bin(name: str) -> str:
    """The npm server's launcher; missing means the test set-up did not run (fail, never skip)."""
    path = BIN / name
    assert path.exists(), f"{path} is missing: run `make mcp-servers` (npm ci in tests/mcp_servers)"
    return str(path)


def call(n: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def exchange(argv: list[str], messages: list[dict[str, Any]]) -> dict[Any, bytes]:
    """Send the messages as lines, keep stdin open until every request is answered (as a
    host does), then close it; return each response line by its id. Closing stdin at once
    races the server: the SDK's stdio server that sees the end of its input may exit before
    answering (1 run in 6 direct), and the gateway then answers MCP_SERVER_EXITED."""
    wanted = {m["id"] for m in messages if "method" in m and "id" in m}
    process = subprocess.Popen(argv, stdin=PIPE, stdout=PIPE, stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None
    out: dict[Any, bytes] = {}

    def keep(line: bytes) -> None:
        message = json.loads(line)
        if "id" in message:
            out[message["id"]] = line.rstrip(b"\n")

    try:
        process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        process.stdin.flush()
        while not wanted <= out.keys():
            line = process.stdout.readline()
            if not line:
                break
            keep(line)
        rest, _ = process.communicate(timeout=patience(60))
        for line in rest.splitlines():
            keep(line)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return out


def failure_item(line: bytes) -> dict[str, Any]:
    result = json.loads(line)["result"]
    assert result["isError"] is True
    item: dict[str, Any] = json.loads(result["content"][-1]["text"])["mendpoint_failure"]
    assert result["_meta"]["mendpoint/failure"] == item
    return item


@pytest.fixture(scope="module")
def fsroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fsroot")
    (root / "a.txt").write_text("hello\n")
    (root / "dir").mkdir()
    return root


FS_CASES = [
    ("enoent", "read_text_file", {"path": "missing.txt"}, "FILE_NOT_FOUND"),
    ("eisdir", "read_text_file", {"path": "dir"}, "PATH_IS_DIRECTORY"),
    ("enotdir", "list_directory", {"path": "a.txt"}, "PATH_NOT_DIRECTORY"),
    ("outside", "read_text_file", {"path": "/etc/hostname"}, "PATH_OUTSIDE_ALLOWED"),
    ("exists", "move_file", {"source": "a.txt", "destination": "a.txt"}, "DESTINATION_EXISTS"),
    ("invalid", "read_text_file", {}, "INVALID_ARGUMENTS"),
    ("unknown-tool", "no_such_tool", {}, "TOOL_NOT_FOUND"),
]


@pytest.fixture(scope="module")
def filesystem_replies(fsroot: Path) -> dict[Any, bytes]:
    server = [npm_bin("mcp-server-filesystem"), str(fsroot)]
    calls = [
        call(
            n,
            tool,
            {
                k: str(fsroot / v) if k != "x" and not v.startswith("/") else v
                for k, v in args.items()
            },
        )
        for n, (_, tool, args, _) in enumerate(FS_CASES, start=1)
    ]
    success = call(100, "read_text_file", {"path": str(fsroot / "a.txt")})
    listing = {"jsonrpc": "2.0", "id": 101, "method": "tools/list"}
    messages = [INIT, INITIALIZED, *calls, success, listing]
    through = exchange([*MENDPOINT, *server], messages)
    direct = exchange(server, messages)
    return {
        **{f"gw:{k}": v for k, v in through.items()},
        **{f"direct:{k}": v for k, v in direct.items()},
    }


@pytest.mark.parametrize(
    ("n", "code"),
    [(n, code) for n, (_, _, _, code) in enumerate(FS_CASES, start=1)],
    ids=[case[0] for case in FS_CASES],
)
def test_filesystem_errors_are_upgraded(
    filesystem_replies: dict[Any, bytes], n: int, code: str
) -> None:
    gw, direct = filesystem_replies[f"gw:{n}"], filesystem_replies[f"direct:{n}"]
    item = failure_item(gw)
    assert item["error"]["code"] == code
    original = json.loads(direct)["result"]["content"]
    assert json.loads(gw)["result"]["content"][: len(original)] == original


def test_filesystem_success_is_byte_identical(filesystem_replies: dict[Any, bytes]) -> None:
    assert filesystem_replies["gw:100"] == filesystem_replies["direct:100"]
    assert b"hello" in filesystem_replies["gw:100"]


def test_filesystem_tools_list_gains_guidance_only(filesystem_replies: dict[Any, bytes]) -> None:
    gw = json.loads(filesystem_replies["gw:101"])["result"]["tools"]
    direct = json.loads(filesystem_replies["direct:101"])["result"]["tools"]
    assert [t["name"] for t in gw] == [t["name"] for t in direct]
    for ours, theirs in zip(gw, direct, strict=True):
        assert ours["description"].startswith(theirs["description"])
        assert "never invent recovery skills" in ours["description"]
        assert {k: v for k, v in ours.items() if k != "description"} == {
            k: v for k, v in theirs.items() if k != "description"
        }


def test_everything_server_errors_and_successes() -> None:
    server = [npm_bin("mcp-server-everything"), "stdio"]
    messages = [INIT, INITIALIZED, call(1, "echo", {"message": "hi"}), call(2, "nope", {})]
    through = exchange([*MENDPOINT, *server], messages)
    direct = exchange(server, messages)
    assert through[1] == direct[1]
    assert failure_item(through[2])["error"]["code"] == "TOOL_NOT_FOUND"


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_sdk_client_and_server_through_stdio(mode: str) -> None:
    params = StdioServerParameters(command=MENDPOINT[0], args=[*MENDPOINT[1:], *SDK_SERVER])
    async with Client(params, mode=mode) as client:
        ok = await client.call_tool("add", {"a": 2, "b": 3})
        assert ok.is_error is not True
        assert ok.structured_content == {"result": 5}
        failed = await client.call_tool("read_note", {"name": "nope"})
        assert failed.is_error is True
        first = failed.content[0]
        assert first.type == "text" and "ENOENT" in first.text
        last = failed.content[-1]
        assert last.type == "text"
        item = json.loads(last.text)["mendpoint_failure"]
        assert item["error"]["code"] == "FILE_NOT_FOUND"
        assert failed.meta is not None
        extension = failed.meta["io.modelcontextprotocol/toolFailure"]
        assert extension["class"] == "capability"
        assert extension["correlationId"] == item["error"]["request_id"]
        transient = await client.call_tool("fetch_page", {"url": "http://x"})
        assert transient.meta is not None
        assert transient.meta["io.modelcontextprotocol/toolFailure"]["class"] == "reliability"
        tools = await client.list_tools()
        assert all("never invent recovery skills" in (t.description or "") for t in tools.tools)


TOOL_FAILURE = "io.modelcontextprotocol/toolFailure"


async def test_rate_limit_text_keeps_its_timing_and_unknowns_claim_no_class() -> None:
    """An API's 429 that a server turned into text still tells the client when to retry; a
    failure no specific rule knows claims no draft class (docs/mcp.md)."""
    params = StdioServerParameters(command=MENDPOINT[0], args=[*MENDPOINT[1:], *SDK_SERVER])
    async with Client(params) as client:
        before_ms = time.time() * 1000
        limited = await client.call_tool("search", {"query": "mcp"})
        after_ms = time.time() * 1000
        item = json.loads(limited.content[-1].text)["mendpoint_failure"]  # type: ignore[union-attr]
        assert item["error"]["code"] == "RATE_LIMITED"
        assert item["error"]["retryable"] is True
        assert item["error"]["retry_after_ms"] == 30_000
        assert limited.meta is not None
        extension = limited.meta[TOOL_FAILURE]
        assert extension["class"] == "reliability" and extension["retryable"] is True
        assert before_ms + 30_000 <= extension["retryNotBefore"] <= after_ms + 30_000
        crashed = await client.call_tool("explode", {})
        item = json.loads(crashed.content[-1].text)["mendpoint_failure"]  # type: ignore[union-attr]
        assert item["error"]["code"] == "TOOL_CRASHED"
        assert crashed.meta is not None and "class" not in crashed.meta[TOOL_FAILURE]
        unknown = await client.call_tool("frobnicate", {})
        assert unknown.meta is not None
        assert "class" not in unknown.meta[TOOL_FAILURE]
        assert unknown.meta[TOOL_FAILURE]["correlationId"]


async def test_compact_form_points_meta_at_the_text_item(tmp_path: Path) -> None:
    """`mcp.compact`: `_meta` refers to the failure's text item instead of repeating it, and
    tool descriptions gain the short sentence."""
    config = tmp_path / "compact.yaml"
    config.write_text(
        json.dumps(
            {
                "routes": [{"name": "stdio", "upstream": "http://127.0.0.1:9"}],
                "mcp": {"compact": True},
            }
        )
    )
    relay = [*MENDPOINT[1:-1], "--config", str(config), "--"]
    params = StdioServerParameters(command=MENDPOINT[0], args=[*relay, *SDK_SERVER])
    async with Client(params) as client:
        failed = await client.call_tool("read_note", {"name": "nope"})
        assert failed.meta is not None
        reference = failed.meta["mendpoint/failure"]
        assert reference == {"content_index": len(failed.content) - 1}
        item = failed.content[reference["content_index"]]
        assert item.type == "text"
        assert json.loads(item.text)["mendpoint_failure"]["error"]["code"] == "FILE_NOT_FOUND"
        assert failed.meta[TOOL_FAILURE]["class"] == "capability"
        tools = await client.list_tools()
        sentence = "On failure, act on the mendpoint_failure item; use only the skills it lists."
        assert all((t.description or "").endswith(sentence) for t in tools.tools)
        assert not any("never invent" in (t.description or "") for t in tools.tools)


async def test_stdio_logs_each_failure_with_its_correlation_id() -> None:
    """The correlationId a client sees can be found in the relay's log (stderr)."""
    argv = ["-m", "gateway", "--log-level", "info", "stdio", "--", *SDK_SERVER]
    relay = await asyncio.create_subprocess_exec(
        sys.executable, *argv, stdin=PIPE, stdout=PIPE, stderr=PIPE
    )
    assert relay.stdin is not None and relay.stdout is not None and relay.stderr is not None
    for message in [INIT, INITIALIZED, call(1, "read_note", {"name": "nope"})]:
        relay.stdin.write(json.dumps(message).encode() + b"\n")
    async with asyncio.timeout(30):
        while (reply := json.loads(await relay.stdout.readline())).get("id") != 1:
            pass
        relay.stdin.close()
        stderr = await relay.stderr.read()
        assert await relay.wait() == 0
    correlation = reply["result"]["_meta"][TOOL_FAILURE]["correlationId"]
    logged = [line for line in stderr.splitlines() if correlation.encode() in line]
    assert len(logged) == 1
    assert b"FILE_NOT_FOUND" in logged[0] and b"read_note" in logged[0]


DYING_SERVER = (
    "import sys\n"
    "sys.stdin.readline()\n"
    "print('not json at all', flush=True)\n"
    "sys.stderr.write('server log line\\n')\n"
    "sys.exit(3)\n"
)


def test_server_death_answers_pending_requests_and_exit_status_passes() -> None:
    lines = json.dumps(call(7, "add", {"a": 1, "b": 2})).encode() + b"\n"
    done = subprocess.run(
        [*MENDPOINT, sys.executable, "-c", DYING_SERVER],
        input=lines,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 3
    out = done.stdout.splitlines()
    assert out[0] == b"not json at all"
    answer = json.loads(out[1])
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32000
    assert b"server log line" in done.stderr


BIG_ECHO = (
    "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"
)


def test_lines_of_several_mib_pass_whole() -> None:
    big = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"pad": "p" * (3 << 20)}})
    done = subprocess.run(
        [*MENDPOINT, sys.executable, "-c", BIG_ECHO],
        input=big.encode() + b"\n",
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout == big.encode() + b"\n"


def test_command_is_required() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "stdio"], capture_output=True, timeout=30, check=False
    )
    assert done.returncode == 2
    assert b"give the server command" in done.stderr


async def test_a_read_only_or_idempotent_tools_transient_failure_is_retryable() -> None:
    """tools/list's readOnlyHint / idempotentHint make a quoted 503 retryable for that tool
    only (docs/rules.md#tool-annotations); a tool without them may have had an effect."""
    params = StdioServerParameters(command=MENDPOINT[0], args=[*MENDPOINT[1:], *SDK_SERVER])
    async with Client(params) as client:
        listed = {t.name: t.annotations for t in (await client.list_tools()).tools}
        assert listed["read_report"] is not None and listed["read_report"].read_only_hint
        for tool, retryable in (
            ("read_report", True),
            ("store_report", True),
            ("send_report", False),
        ):
            failed = await client.call_tool(tool, {"day": "mon", "text": "x"})
            assert failed.is_error is True
            first, last = failed.content[0], failed.content[-1]
            assert first.type == "text" and "HTTP 503 Service Unavailable" in first.text
            assert last.type == "text"
            error = json.loads(last.text)["mendpoint_failure"]["error"]
            assert error["code"] == "UPSTREAM_UNAVAILABLE", tool
            assert error["retryable"] is retryable, tool
            assert error["retry_after_ms"] == (1000 if retryable else None), tool


LOWLEVEL_SERVER = [sys.executable, str(SERVERS / "lowlevel_server.py"), "9"]


async def test_a_failed_call_without_a_required_argument_is_the_callers_to_fix() -> None:
    """The low-level SDK server lists `describe` as requiring resource_type and name but never
    checks: without name it goes to the (closed) cluster and answers with the refused
    connection. Through the gateway that call is INVALID_ARGUMENTS naming `name`
    (docs/rules.md#required-arguments), the server's content first and unchanged; the same
    refusal with every required argument given stays the transient failure it is."""
    partial, complete = (
        {"resource_type": "deployment"},
        {"resource_type": "deployment", "name": "web"},
    )
    direct_params = StdioServerParameters(command=LOWLEVEL_SERVER[0], args=LOWLEVEL_SERVER[1:])
    async with Client(direct_params) as client:
        listed_direct = (await client.list_tools()).tools[0]
        direct = await client.call_tool("describe", partial)
    params = StdioServerParameters(command=MENDPOINT[0], args=[*MENDPOINT[1:], *LOWLEVEL_SERVER])
    async with Client(params) as client:
        listed = (await client.list_tools()).tools[0]
        failed = await client.call_tool("describe", partial)
        transient = await client.call_tool("describe", complete)
    assert listed.input_schema == listed_direct.input_schema
    server_text = direct.content[0].text  # type: ignore[union-attr]
    assert direct.is_error is True and "Connection refused" in server_text
    assert failed.is_error is True and failed.content[0].text == server_text  # type: ignore[union-attr]
    error = json.loads(failed.content[-1].text)["mendpoint_failure"]["error"]  # type: ignore[union-attr]
    assert (error["code"], error["retryable"]) == ("INVALID_ARGUMENTS", False)
    assert "name" in error["fix_required"] and "resource_type" not in error["fix_required"]
    assert error["message"] == server_text
    other = json.loads(transient.content[-1].text)["mendpoint_failure"]["error"]  # type: ignore[union-attr]
    assert (other["code"], other["retryable"]) == ("TOOL_DEPENDENCY_UNREACHABLE", True)


def test_a_tool_never_listed_is_not_taken_as_replay_safe() -> None:
    through = exchange([*MENDPOINT, *SDK_SERVER], [INIT, INITIALIZED, call(2, "read_report", {})])
    assert failure_item(through[2])["error"]["retryable"] is False


def test_a_jsonrpc_error_whose_data_is_a_string_carries_the_failure_and_keeps_the_string() -> None:
    """The Python SDK answers an unknown method with `data: "foo/bar"`: the string moves
    whole under `data["mendpoint/data"]`, the failure beside it (docs/mcp.md)."""
    unknown = {"jsonrpc": "2.0", "id": 2, "method": "foo/bar", "params": {}}
    direct = answer_of(SDK_SERVER, [INIT, INITIALIZED, unknown], 2)["error"]
    error = answer_of([*MENDPOINT, *SDK_SERVER], [INIT, INITIALIZED, unknown], 2)["error"]
    assert direct["data"] == "foo/bar"
    assert (error["code"], error["message"]) == (direct["code"], direct["message"])
    assert error["data"]["mendpoint/data"] == direct["data"]
    failure = error["data"]["mendpoint/failure"]["error"]
    assert failure["code"] == "METHOD_NOT_FOUND" and failure["message"] == "Method not found"


def answer_of(argv: list[str], messages: list[dict[str, Any]], wanted: int) -> dict[str, Any]:
    """The response with id `wanted`, read before stdin is closed (the SDK's server drops
    requests still in flight when its input ends)."""
    process = subprocess.Popen(argv, stdin=PIPE, stdout=PIPE, stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None
    try:
        for message in messages:
            process.stdin.write(json.dumps(message).encode() + b"\n")
        process.stdin.flush()
        deadline = time.monotonic() + patience(60)
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "the server ended without answering"
            answer: dict[str, Any] = json.loads(line)
            if answer.get("id") == wanted:
                return answer
        raise AssertionError(f"no answer to {wanted} in 60 s")
    finally:
        process.stdin.close()
        process.wait(timeout=30)
        process.stdout.close()
