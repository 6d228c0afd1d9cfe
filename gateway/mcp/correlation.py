"""Tying MCP responses to their requests, and the one payload rewriter every relay calls.

The Streamable HTTP route, the bridge and `mendpoint stdio` each tie a response to the
request it answers (an HTTP route through a `Tracker`, stdio through its session's table)
and upgrade it with `rewrite_payload`, under their own `CallSite`
(gateway/mcp/call_site.py for an HTTP request). Light on imports: `mendpoint stdio` loads
it before its config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from gateway.mcp.jsonrpc import (
    Pending,
    RequestTable,
    encode,
    may_be_response,
    may_need_rewrite,
    parse_message,
    request_key,
)

if TYPE_CHECKING:
    from gateway.mcp.upgrade import CallSite, Outcome, Upgrader


class Correlates(Protocol):
    """What ties a response to the request it answers: `pop` gives the request (once)."""

    def pop(self, message: Any) -> Pending | None: ...


class Tracker:
    """This POST's own requests, plus the session's table shared with its GET streams."""

    def __init__(self, local: RequestTable, shared: RequestTable | None) -> None:
        self.local = local
        self.shared = shared

    def __bool__(self) -> bool:
        """Whether any response in this exchange could be a tracked one."""
        return bool(self.local) or self.shared is not None

    def pop(self, message: Any) -> Pending | None:
        if not isinstance(message, dict) or "method" in message:
            return None
        key = request_key(message.get("id"))
        if key is None:
            return None
        found = self.local.pop(key)
        # The session's entry stays (bounded, oldest evicted, dropped with the session): a
        # stream resumed with Last-Event-ID replays this response, and it must be upgraded
        # like its first delivery.
        shared = self.shared.get(key) if self.shared is not None else None
        return found or shared


UNPARSED: Any = object()


async def rewrite_payload(
    raw: bytes,
    tracker: Correlates,
    upgrader: Upgrader,
    site: CallSite,
    message: Any = UNPARSED,
) -> tuple[bytes | None, list[tuple[str, str]]]:
    """A JSON-RPC message (or batch) with tracked responses upgraded; None when unchanged.

    `raw` is parsed only when its bytes may hold something to upgrade (a tool error, a
    JSON-RPC error, a tool list) or a success to notice (gateway/mcp/reported_failures.py),
    and then once. A response left unparsed stays in the
    tracker's per-exchange table, which ends with the exchange; the session's table keeps
    its entries anyway (`Tracker.pop`). `message`: `raw` already parsed (the bridge parses
    each child line once, to route it).
    """
    if not may_be_response(raw):
        return None, []
    if not may_need_rewrite(raw, upgrader.reads_successes) and not upgrader.may_notice(raw):
        return None, []  # a success: the server's bytes go out, never parsed here
    if message is UNPARSED:
        message = parse_message(raw)
    batch = message if isinstance(message, list) else [message]
    pendings = [tracker.pop(item) for item in batch]
    if not any(pendings):
        return None, []
    outcomes: list[Outcome | None] = []
    for item, pending in zip(batch, pendings, strict=True):
        outcomes.append(None if pending is None else await upgrader.upgrade(item, pending, site))
    headers = next((o.headers for o in outcomes if o is not None and o.headers), [])
    if all(o is None or o.message is None for o in outcomes):
        return None, headers
    out = [
        o.message if o is not None and o.message is not None else item
        for item, o in zip(batch, outcomes, strict=True)
    ]
    return encode(out if isinstance(message, list) else out[0]), headers
