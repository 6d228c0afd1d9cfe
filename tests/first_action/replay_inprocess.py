"""The MCP recordings through the gateway's own upgrade step, in process, in a second.

`mendpoint stdio` hands every response it relays to `Upgrader.upgrade` (gateway/mcp/upgrade.py)
with the request it answers; this does the same with the recorded responses, on the config
`mendpoint stdio` runs with no `--config` (the embedded default) and the call site of a stdio
session, in the same order as a session: `tools/list` first (the tools' annotations are read
there), then every call. What comes out is written as the relay writes it (`encode`) and judged
as the live run and the subprocess replay judge it (docs/packs/corpus.md#replay). What this
leaves out is the relay's process and pipes, which `tests.first_action.replay` covers.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.config.loader import embedded_config
from gateway.enrich.step import Enricher
from gateway.failure import Mode
from gateway.mcp.jsonrpc import encode, may_need_rewrite, requests_in
from gateway.mcp.stdio import StdioCallSite
from gateway.mcp.upgrade import Upgrader
from tests.first_action.mcp_live import FIRST_CALL_ID, judge
from tests.first_action.model import RECORDED, McpServer
from tests.first_action.outcome import Outcome

TOOLS_LIST_ID = 1


def recording(server: McpServer) -> dict[str, Any] | None:
    path = RECORDED / "mcp" / f"{server.name}.json"
    return json.loads(path.read_text("utf-8")) if path.exists() else None


async def replay_server(server: McpServer, recorded: dict[str, Any]) -> list[Outcome]:
    """Each recorded call's response through a fresh `Upgrader`, as one stdio session."""
    loaded = embedded_config("http://127.0.0.1:9")
    enricher = Enricher.build(loaded)
    upgrader = Upgrader(enricher, loaded.config.mcp)
    site = StdioCallSite(mode=Mode.ADDITIVE, request_id="corpus")
    requests: dict[str, Any] = recorded["requests"]
    responses: dict[str, str | None] = recorded["responses"]
    try:
        listed = {"jsonrpc": "2.0", "id": TOOLS_LIST_ID, "method": "tools/list", "params": {}}
        await _relayed(upgrader, site, listed, responses.get(str(TOOLS_LIST_ID)))
        outcomes = []
        for index, call in enumerate(server.calls):
            request_id = FIRST_CALL_ID + index
            message = requests.get(str(request_id))
            if message is None:
                continue
            direct = responses.get(str(request_id))
            through = await _relayed(upgrader, site, message, direct)
            outcomes.append(judge(server.name, call, direct, through, server.held_out))
        return outcomes
    finally:
        await enricher.close()


async def _relayed(
    upgrader: Upgrader, site: StdioCallSite, request: dict[str, Any], response: str | None
) -> str | None:
    """The response as the stdio relay would send it on: upgraded, or the server's text."""
    if response is None:
        return None
    pending = [p for _, p in requests_in(request)]
    message = json.loads(response)
    if not pending or not isinstance(message, dict) or not may_need_rewrite(response.encode()):
        return response
    outcome = await upgrader.upgrade(message, pending[0], site)
    if outcome is None or outcome.message is None:
        return response
    new = encode(outcome.message)
    return response if new is None else new.decode()
