"""A server that exits before answering gets one answer from the gateway, on stdio and on the
bridge (docs/mcp.md#a-server-that-exits): the same JSON-RPC error, the same failure, and
`retryable` only where a new session would help (the bridge, for a call safe to repeat)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import aiohttp
import pytest

from tests.support.gateway import StartGateway
from tests.support.mcp import INIT, RawSession, bridge_config, call

EXITS_AFTER_INIT = (
    "import json, sys\n"
    "req = json.loads(sys.stdin.readline())\n"
    "print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': {"
    "'protocolVersion': '2025-11-25', 'capabilities': {}, "
    "'serverInfo': {'name': 'brief', 'version': '1'}}}), flush=True)\n"
    "sys.stdin.readline()\n"
)
SERVER = [sys.executable, "-c", EXITS_AFTER_INIT]
MENDPOINT = [sys.executable, "-m", "gateway", "--log-level", "warning", "stdio"]


def through_stdio(mode: str) -> dict[str, Any]:
    lines = b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, call(5, "add", {})))
    done = subprocess.run(
        [*MENDPOINT, "--mode", mode, "--", *SERVER],
        input=lines,
        capture_output=True,
        timeout=60,
        check=False,
    )
    answers: list[dict[str, Any]] = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["id"] for a in answers] == [0, 5]
    return answers[1]


async def through_bridge(start_gateway: StartGateway, **route: Any) -> dict[str, Any]:
    gateway = await start_gateway(bridge_config(SERVER, **route))
    async with aiohttp.ClientSession() as http:
        session = RawSession(http, gateway.url + "/mcp")
        init = await session.post(INIT)
        session.headers["Mcp-Session-Id"] = init.headers["Mcp-Session-Id"]
        answer = await session.post(call(5, "add", {}))
        assert answer.status == 200
        found: dict[str, Any] = json.loads(await answer.read())
        return found


def failure(answer: dict[str, Any]) -> dict[str, Any]:
    error = answer["error"]
    assert error["code"] == -32000
    assert error["message"] == "The MCP server exited before answering tools/call"
    item: dict[str, Any] = error["data"]["mendpoint/failure"]
    assert item["error"]["code"] == "MCP_SERVER_EXITED"
    assert item["failure"]["category"] == "UNAVAILABLE"
    return item


async def test_the_dead_server_answer_is_one_on_stdio_and_the_bridge(
    start_gateway: StartGateway,
) -> None:
    on_stdio = failure(through_stdio("additive"))
    on_bridge = failure(await through_bridge(start_gateway))
    assert on_stdio.keys() == on_bridge.keys()
    assert on_stdio["error"].keys() == on_bridge["error"].keys()
    assert on_stdio["failure"].keys() == on_bridge["failure"].keys()
    # stdio ends with its server: only the host can start it again.
    assert on_stdio["error"]["retryable"] is False
    assert "Start the MCP server again" in on_stdio["error"]["fix_required"]
    # The bridge: the next session has a new server, but this call may have run: a call
    # that is not safe to repeat is not retryable either.
    assert on_bridge["error"]["retryable"] is False
    assert on_bridge["error"]["fix_required"] is None


async def test_a_call_safe_to_repeat_is_retryable_on_the_bridge(
    start_gateway: StartGateway,
) -> None:
    item = failure(await through_bridge(start_gateway, idempotent_methods=["POST"]))
    assert item["error"]["retryable"] is True
    assert item["error"]["retry_after_ms"] == 0


@pytest.mark.parametrize("side", ["stdio", "bridge"])
async def test_in_original_mode_the_answer_is_the_plain_error(
    start_gateway: StartGateway, side: str
) -> None:
    if side == "stdio":
        answer = through_stdio("original")
    else:
        answer = await through_bridge(start_gateway, mode="original")
    assert answer == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {"code": -32000, "message": "The MCP server exited before answering tools/call"},
    }
