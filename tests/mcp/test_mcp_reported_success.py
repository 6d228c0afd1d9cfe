"""An opt-in rule for a tool that reports its failures as successes (`isError: false`):
`match.mcp.is_error: false` (docs/rules.md#failures-reported-as-successes). Off by default:
without such a rule every success passes byte for byte, unparsed."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from tests.support.mcp import DB_RULE, INIT
from tests.support.paths import MCP_SERVERS

SDK_SERVER = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(n: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


async def answers(argv: list[str], messages: list[dict[str, Any]]) -> dict[int, bytes]:
    """Each response line by id, every answer read before stdin closes."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=-1, stdout=-1, stderr=asyncio.subprocess.DEVNULL
    )
    assert process.stdin is not None and process.stdout is not None
    wanted = {m["id"] for m in messages if "id" in m}
    out: dict[int, bytes] = {}
    for message in messages:
        process.stdin.write(json.dumps(message).encode() + b"\n")
    await process.stdin.drain()
    while set(out) != wanted:
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, f"the server ended with {sorted(wanted - set(out))} unanswered"
        answer = json.loads(line)
        if answer.get("id") in wanted:
            out[answer["id"]] = line.rstrip(b"\n")
    process.stdin.close()
    await asyncio.wait_for(process.wait(), 30)
    return out


def gateway(config: Path | None) -> list[str]:
    argv = [sys.executable, "-m", "gateway", "--log-level", "warning", "stdio"]
    return [*argv, *(["--config", str(config)] if config else []), "--", *SDK_SERVER]


SESSION = [
    INIT,
    INITIALIZED,
    call(2, "query_db", {"sql": "select * from widgets"}),
    call(3, "query_db", {"sql": "select 1"}),
    call(4, "add", {"a": 1, "b": 2}),
]


@pytest.mark.timeout(120)
async def test_an_opted_in_tools_error_text_becomes_a_failure_and_nothing_else_changes(
    tmp_path: Path,
) -> None:
    config = tmp_path / "gw.yaml"
    route = {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}
    config.write_text(yaml.safe_dump({"routes": [route], "rules": [DB_RULE]}))
    direct = await answers(SDK_SERVER, SESSION)
    through = await answers(gateway(config), SESSION)
    plain = await answers(gateway(None), SESSION)
    original = json.loads(direct[2])["result"]
    assert original.get("isError") is False
    assert plain[2] == direct[2]  # by default: the contract, a success passes untouched
    upgraded = json.loads(through[2])["result"]
    assert upgraded["isError"] is True
    assert upgraded["content"][: len(original["content"])] == original["content"]
    failure = json.loads(upgraded["content"][-1]["text"])["mendpoint_failure"]["error"]
    assert failure["code"] == "DATABASE_ERROR"
    assert failure["message"] == "Database error: no such table: widgets"
    assert failure["fix_required"].startswith("Correct the query")
    assert through[3] == direct[3]  # the same tool's real success: its bytes
    assert through[4] == direct[4]  # another tool's success: its bytes


def test_such_a_rule_must_name_its_tools_and_words(tmp_path: Path) -> None:
    loose = {**DB_RULE, "match": {"mcp": {"is_error": False}}}
    config = tmp_path / "gw.yaml"
    route = {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}
    config.write_text(yaml.safe_dump({"routes": [route], "rules": [loose]}))
    with pytest.raises(ConfigError) as raised:
        load_config(str(config))
    text = str(raised.value)
    assert "is_error: false needs the tool(s) it is for" in text
    assert "is_error: false needs the body words of a failure" in text
    assert "gw.yaml:" in text
