"""Tying an MCP route's responses to their requests, and the call site they upgrade under.

Shared by the Streamable HTTP handler (upstream URL) and the bridge (stdio child): both tie a
response to the request it answers through a `Tracker`, and upgrade it with `rewrite_payload`
under the `HttpCallSite` of the HTTP request that carries it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.enrich.step import FailureContext
from gateway.exchange.context import RequestContext
from gateway.failure import Mode
from gateway.mcp.jsonrpc import (
    Pending,
    RequestTable,
    encode,
    may_be_response,
    may_need_rewrite,
    parse_message,
    request_key,
)
from gateway.mcp.upgrade import CallSite, Outcome, Upgrader
from gateway.resolve.service import Situation


@dataclass(frozen=True, slots=True)
class HttpCallSite:
    """The `CallSite` of one HTTP request: mode and caller come from the proxy's context."""

    ctx: RequestContext

    @property
    def route_name(self) -> str:
        return self.ctx.route.spec.name

    @property
    def path(self) -> str:
        return self.ctx.request.path

    @property
    def mode(self) -> Mode:
        return self.ctx.mode

    @property
    def idempotent(self) -> bool:
        return "POST" in self.ctx.route.idempotent

    def failure_context(self, situation: Situation) -> FailureContext:
        return self.ctx.failure_context(situation)


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
    tracker: Tracker,
    upgrader: Upgrader,
    site: CallSite,
    message: Any = UNPARSED,
) -> tuple[bytes | None, list[tuple[str, str]]]:
    """A JSON-RPC message (or batch) with tracked responses upgraded; None when unchanged.

    `raw` is parsed only when its bytes may hold something to upgrade (a tool error, a
    JSON-RPC error, a tool list), and then once. A response left unparsed stays in the
    tracker's per-exchange table, which ends with the exchange; the session's table keeps
    its entries anyway (`Tracker.pop`). `message`: `raw` already parsed (the bridge parses
    each child line once, to route it).
    """
    if not may_be_response(raw) or not may_need_rewrite(raw, upgrader.reads_successes):
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
