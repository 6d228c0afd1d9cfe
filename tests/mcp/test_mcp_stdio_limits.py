"""`mendpoint stdio` past everyday use: slow calls when the client closes its input, and
messages over `mcp.max_message_bytes` in both directions (docs/mcp.md, "stdio").

The peers are real: the npm everything server (its long-running operation finishes after its
input closes, and it exits 0, when run directly) and small stdio children."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.mcp import INIT
from tests.support.paths import MCP_SERVERS

EVERYTHING = MCP_SERVERS / "node_modules" / ".bin" / "mcp-server-everything"
RELAY = [sys.executable, "-m", "gateway", "--log-level", "warning", "stdio"]

INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIMIT = 64 * 1024


def everything() -> list[str]:
    assert EVERYTHING.exists(), f"{EVERYTHING} is missing: run `make mcp-servers`"
    return [str(EVERYTHING), "stdio"]


def long_call(n: int, seconds: int) -> dict[str, Any]:
    arguments = {"duration": seconds, "steps": 2}
    params = {"name": "trigger-long-running-operation", "arguments": arguments}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def run(argv: list[str], lines: bytes, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, input=lines, capture_output=True, timeout=timeout, check=False)


def replies(stdout: bytes) -> dict[Any, list[dict[str, Any]]]:
    """Every line with an id, by id (a list: each id must be answered exactly once)."""
    out: dict[Any, list[dict[str, Any]]] = {}
    for line in stdout.splitlines():
        message = json.loads(line)
        if "id" in message and "method" not in message:
            out.setdefault(message["id"], []).append(message)
    return out


def encoded(*messages: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


def test_a_slow_call_finishes_after_the_client_closes_its_input() -> None:
    session = encoded(INIT, INITIALIZED, long_call(1, 6))
    direct = run(everything(), session)
    through = run([*RELAY, "--", *everything()], session)
    assert direct.returncode == 0
    assert through.returncode == 0, through.stderr.decode(errors="replace")
    [answer] = replies(through.stdout)[1]
    assert answer == replies(direct.stdout)[1][0]
    assert "completed" in answer["result"]["content"][0]["text"]


def test_past_the_grace_the_server_is_ended_and_the_call_answered(tmp_path: Path) -> None:
    session = encoded(INIT, INITIALIZED, long_call(1, 20))
    through = run([*RELAY, "--grace", "1", "--", *everything()], session)
    assert through.returncode == 128 + 15  # SIGTERM
    [answer] = replies(through.stdout)[1]
    assert answer["error"]["code"] == -32000


ECHO_SERVER = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    size = message.get("params", {}).get("size", 0)
    result = {"content": [{"type": "text", "text": "x" * size}], "got": len(line)}
    reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
    if message.get("params", {}).get("id_last"):
        reply = {"result": result, "jsonrpc": "2.0", "id": message["id"]}
    sys.stdout.write(json.dumps(reply) + "\\n")
    sys.stdout.flush()
"""


def config(tmp_path: Path) -> Path:
    path = tmp_path / "limits.yaml"
    path.write_text(
        json.dumps(
            {
                "routes": [{"name": "stdio", "upstream": "http://127.0.0.1:9"}],
                "mcp": {"max_message_bytes": LIMIT},
            }
        )
    )
    return path


def call(n: int, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def test_over_limit_messages_pass_whole_and_the_relay_goes_on(tmp_path: Path) -> None:
    """A server line over the limit reaches the client whole (not cut, nothing glued to it);
    a client line over the limit reaches the server whole; later requests still get their
    answers, each exactly one, and the exit status is the server's."""
    server = [sys.executable, "-c", ECHO_SERVER]
    big_client = call(3, name="t", pad="p" * (3 * LIMIT))
    session = encoded(
        INIT,
        call(1, name="t", size=3 * LIMIT),
        call(2, name="t", size=3 * LIMIT, id_last=True),
        big_client,
        call(4, name="t", size=10),
    )
    direct = run(server, session)
    through = run([*RELAY, "--config", str(config(tmp_path)), "--", *server], session)
    assert through.returncode == 0
    assert through.stdout == direct.stdout
    got = replies(through.stdout)
    assert sorted(got) == [0, 1, 2, 3, 4] and all(len(v) == 1 for v in got.values())
    assert got[3][0]["result"]["got"] == len(json.dumps(big_client)) + 1


def test_a_server_that_dies_after_an_over_limit_answer_answers_the_rest_once(
    tmp_path: Path,
) -> None:
    """The over-limit answer counts as the answer: the relay does not make up a second one."""
    dying = ECHO_SERVER.replace("sys.stdout.flush()", "sys.stdout.flush(); sys.exit(3)")
    server = [sys.executable, "-c", dying]
    session = encoded(call(1, name="t", size=3 * LIMIT), call(2, name="t", size=1))
    through = run([*RELAY, "--config", str(config(tmp_path)), "--", *server], session)
    assert through.returncode == 3
    got = replies(through.stdout)
    assert len(got[1]) == 1 and "result" in got[1][0]
    assert len(got[2]) == 1 and got[2][0]["error"]["code"] == -32000
