"""What an upgrade costs an agent's context: bytes and tokens MCP failures and `tools/list` gain.

`python -m bench.mcp_weight` runs the npm filesystem server (`make mcp-servers`) directly and
through `mendpoint stdio` in the full and the compact form, sends the same session to each
(one failing `read_text_file`, one `tools/list`), and prints what the gateway added.

Tokens are estimated as characters / 4 (the usual rule of thumb for English text and JSON
with OpenAI-style BPE tokenisers; no tokeniser ships in the test extra, and tiktoken needs its
encoding files from the network). "Seen by the model" counts the text item only: clients hand
content items to the model and keep `_meta` for themselves; "on the wire" counts everything.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FILESYSTEM = REPO / "tests" / "mcp_servers" / "node_modules" / ".bin" / "mcp-server-filesystem"
CHARS_PER_TOKEN = 4
INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "weight", "version": "1"},
    },
}
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}
FAILING, LISTING = 1, 2


def tokens(chars: int) -> int:
    """The chars/4 estimate, rounded to the nearest token."""
    return round(chars / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Weight:
    """What one form added to a failure and to a `tools/list` answer."""

    form: str
    failure_wire_bytes: int
    failure_model_chars: int
    tools: int
    tools_list_chars: int

    def row(self) -> str:
        return (
            f"| {self.form} | {self.failure_wire_bytes} | {self.failure_model_chars} "
            f"(≈{tokens(self.failure_model_chars)} tokens) | "
            f"{self.tools_list_chars // max(self.tools, 1)} per tool, {self.tools_list_chars} "
            f"for {self.tools} tools (≈{tokens(self.tools_list_chars)} tokens) |"
        )


def session(argv: list[str], root: Path) -> dict[int, bytes]:
    """Each response line by id, for the session sent on stdin (closed once it is sent)."""
    call = {"name": "read_text_file", "arguments": {"path": str(root / "missing.txt")}}
    messages = [
        INIT,
        INITIALIZED,
        {"jsonrpc": "2.0", "id": FAILING, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "id": LISTING, "method": "tools/list"},
    ]
    lines = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    done = subprocess.run(argv, input=lines, capture_output=True, timeout=60, check=True)
    out: dict[int, bytes] = {}
    for line in done.stdout.splitlines():
        message = json.loads(line)
        if isinstance(message.get("id"), int):
            out[message["id"]] = line
    return out


def added(direct: dict[int, bytes], through: dict[int, bytes], form: str) -> Weight:
    plain = json.loads(direct[FAILING])["result"]
    upgraded = json.loads(through[FAILING])["result"]
    failure_text = upgraded["content"][-1]["text"]
    assert len(upgraded["content"]) == len(plain["content"]) + 1, "the failure was not upgraded"
    before = {t["name"]: t.get("description") or "" for t in _tools(direct)}
    after = {t["name"]: t.get("description") or "" for t in _tools(through)}
    return Weight(
        form=form,
        failure_wire_bytes=len(through[FAILING]) - len(direct[FAILING]),
        failure_model_chars=len(failure_text),
        tools=len(after),
        tools_list_chars=sum(len(after[name]) - len(before[name]) for name in after),
    )


def _tools(replies: dict[int, bytes]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads(replies[LISTING])["result"]["tools"]
    return tools


def measure() -> list[Weight]:
    """The full (default) and compact forms against the direct answers of the same server."""
    assert FILESYSTEM.exists(), f"{FILESYSTEM} is missing: run `make mcp-servers`"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        server = [str(FILESYSTEM), str(root)]
        direct = session(server, root)
        weights = []
        for form, compact in (("full (default)", False), ("compact", True)):
            config = root / f"{compact}.yaml"
            config.write_text(
                json.dumps(
                    {
                        "routes": [{"name": "stdio", "upstream": "http://127.0.0.1:9"}],
                        "mcp": {"compact": compact},
                    }
                )
            )
            relay = [sys.executable, "-m", "gateway", "--log-level", "warning", "stdio"]
            through = session([*relay, "--config", str(config), "--", *server], root)
            weights.append(added(direct, through, form))
    return weights


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    print("| form | failure: bytes added on the wire | failure: seen by the model | tools/list |")
    print("|---|---|---|---|")
    for weight in measure():
        print(weight.row())
    return 0


if __name__ == "__main__":
    sys.exit(main())
