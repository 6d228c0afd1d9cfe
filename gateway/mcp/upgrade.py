"""Upgrading one JSON-RPC response: the enrichment step, rendered as a rewritten message.

Takes a decoded response and the request it answers; returns an `Outcome` (the new message,
or only advisory headers in `headers` mode) or None to send the server's bytes unchanged.
Classification, resolution, the budget, fail-open and counting are the one step every
transport shares (`gateway.enrich.step`); this module only says what an MCP failure looks like to
the rules and how an upgraded tool result or JSON-RPC error is written (docs/mcp.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.classify import Observation, ObservationKind, Verdict
from gateway.classify.argument_text import is_credential
from gateway.config.models import McpSpec
from gateway.enrich.envelope import error_object, failure_object
from gateway.enrich.step import Enricher, FailureContext, Render
from gateway.exchange.answer import advisory_headers
from gateway.failure import Failure, Mode, Recovery, Refusal
from gateway.mcp.jsonrpc import Pending
from gateway.mcp.reported_failures import failure_text, may_report_failure, noted_message
from gateway.mcp.rewrite import (
    guided_tools_list,
    is_reported_success,
    is_tool_error,
    tool_error_text,
    tool_failure,
    upgraded_error,
    upgraded_tool_result,
)
from gateway.mcp.tool_hints import ToolBook
from gateway.resolve.service import Situation
from gateway.text.json_text import dump

log = logging.getLogger("mendpoint.mcp")

BOM = "\ufeff"
CALL_METHOD = "POST"
"""The method MCP observations carry: a JSON-RPC call is a POST, whatever the transport."""
UPGRADED_MODES = (Mode.ADDITIVE, Mode.ENVELOPE)
Rewrite = Callable[[Failure, dict[str, Any]], dict[str, Any] | None]
"""A failure and its `{error, failure, recovery}` payload → the upgraded message (None: keep)."""


class CallSite(Protocol):
    """Where a JSON-RPC call came from (an HTTP request of an MCP route, or a stdio session):
    what the rules see of it, and its `FailureContext` once one of its calls failed."""

    @property
    def route_name(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def mode(self) -> Mode: ...
    @property
    def idempotent(self) -> bool: ...
    def failure_context(self, situation: Situation) -> FailureContext: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """A rewritten message (None: keep the bytes) and the advisory headers it earns."""

    message: dict[str, Any] | None
    headers: list[tuple[str, str]]
    verdict: Verdict | None = None
    """The classification behind it (in `original` mode, the only thing an outcome says)."""


@dataclass(frozen=True, slots=True)
class Upgrader:
    """The config's enrichment step and MCP settings: all an MCP relay needs to upgrade."""

    enricher: Enricher
    settings: McpSpec
    tools: ToolBook = field(default_factory=ToolBook)
    """The tools the server listed: which are safe to call again (gateway/mcp/tool_hints.py).
    A relay that outlives one request passes its own (the MCP runtime's, a stdio relay's)."""
    noticed: Callable[[str, str], None] | None = None
    """Told (route, message) of a result reported as a success whose text reads as a failure
    and that no rule named: the gaps' `mcp:reported_success` signatures
    (gateway/mcp/reported_failures.py). None: such results are not looked for."""

    async def upgrade(self, message: Any, pending: Pending, site: CallSite) -> Outcome | None:
        """The outcome for a response to `pending`, or None: send it exactly as it came."""
        if not isinstance(message, dict):
            return None
        if pending.method == "tools/list" and "result" in message:
            self.tools.learn(site.route_name, message["result"])  # in every mode
        if "error" in message:
            return await self._error(message, pending, site)
        result = message.get("result")
        if pending.method == "tools/call" and isinstance(result, dict) and is_tool_error(result):
            return await self._tool_error(message, result, pending, site)
        calls = pending.method == "tools/call"
        if calls and isinstance(result, dict) and is_reported_success(result):
            return await self._reported_success(message, result, pending, site)
        if pending.method == "tools/list" and site.mode in UPGRADED_MODES:
            return self._guided(message, result)
        return None

    async def own_error(
        self, message: dict[str, Any], pending: Pending, site: CallSite, refusal: Refusal
    ) -> Outcome | None:
        """The outcome for a JSON-RPC error the gateway wrote itself (`rpc_errors`), whose
        failure is its built-in rule for `refusal`: one answer whatever the transport."""
        error = message["error"]
        obs = Observation(
            route=site.route_name,
            method=CALL_METHOD,
            path=site.path,
            kind=ObservationKind.REFUSAL,
            refusal=refusal,
            body=dump(error),
            content_type="application/json",
            idempotent=site.idempotent,
            tool=pending.tool,
            jsonrpc_code=error["code"],
        )

        def rewrite(_: Failure, payload: dict[str, Any]) -> dict[str, Any] | None:
            upgraded = upgraded_error(error, payload)
            return None if upgraded is None else {**message, "error": upgraded}

        ctx = _failure_context(site, pending)
        return await self.enricher.enrich(obs, ctx, self._renderer(ctx, rewrite))

    def _guided(self, message: dict[str, Any], result: Any) -> Outcome | None:
        try:
            guided = guided_tools_list(result, self.settings.guidance)
        except Exception:
            log.exception("tools/list guidance failed; original sent")
            return None
        return None if guided is None else Outcome({**message, "result": guided}, [])

    async def _reported_success(
        self, message: dict[str, Any], result: dict[str, Any], pending: Pending, site: CallSite
    ) -> Outcome | None:
        """A rule opted in to this tool's successes names it, or it is noticed (or neither)."""
        if self.reads_successes:
            outcome = await self._tool_error(message, result, pending, site, True)
            if outcome is not None:
                return outcome
        if self.noticed is not None:
            text = failure_text(result)
            if text is not None:
                self.noticed(site.route_name, noted_message(pending.tool, text))
        return None

    def may_notice(self, raw: bytes) -> bool:
        """Could `raw` hold a success this upgrader notices? (A bounded byte scan.)"""
        return self.noticed is not None and may_report_failure(raw)

    @property
    def reads_successes(self) -> bool:
        """A rule opted in to results reported as successes: relays must hand those over too
        (docs/rules.md#failures-reported-as-successes); otherwise they never parse one."""
        return self.enricher.classifier.reads_successes

    async def _tool_error(
        self,
        message: dict[str, Any],
        result: dict[str, Any],
        pending: Pending,
        site: CallSite,
        reported_success: bool = False,
    ) -> Outcome | None:
        obs = tool_error_observation(
            site, pending, tool_error_text(result), self._safe(site, pending)
        )
        structured = result.get("structuredContent")
        if isinstance(structured, dict):  # the server's envelope, when its text is not JSON
            obs.known_json(structured)
        if reported_success:  # tried only on the rules written for such results
            obs.kind = ObservationKind.REPORTED_SUCCESS
        self._argued(obs, site, pending)
        ctx = _failure_context(site, pending)
        _traced_failure(ctx, None)

        def rewrite(failure: Failure, payload: dict[str, Any]) -> dict[str, Any]:
            extension = None
            if self.settings.tool_failure_extension:
                extension = tool_failure(failure, ctx.request_id)
            upgraded = upgraded_tool_result(
                result, payload, self.settings.failure_key, extension, self.settings.compact
            )
            if reported_success:  # a rule the operator wrote says this success is a failure
                upgraded["isError"] = True
            return {**message, "result": upgraded}

        return await self.enricher.enrich(obs, ctx, self._renderer(ctx, rewrite))

    async def _error(
        self, message: dict[str, Any], pending: Pending, site: CallSite
    ) -> Outcome | None:
        error = message.get("error")
        if not isinstance(error, dict):
            return None
        code = error.get("code")
        jsonrpc_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        obs = _observation(site, pending, dump(error), jsonrpc_code, self._safe(site, pending))
        self._argued(obs, site, pending)

        def rewrite(_: Failure, payload: dict[str, Any]) -> dict[str, Any] | None:
            upgraded = upgraded_error(error, payload)
            return None if upgraded is None else {**message, "error": upgraded}

        ctx = _failure_context(site, pending)
        if jsonrpc_code is not None:
            _traced_failure(ctx, jsonrpc_code)
        return await self.enricher.enrich(obs, ctx, self._renderer(ctx, rewrite))

    def _safe(self, site: CallSite, pending: Pending) -> bool:
        """The call may be sent again: the site says so, or tools/list declared the tool
        read-only or idempotent (`match.idempotent` then holds; docs/rules.md)."""
        return site.idempotent or self.tools.is_replay_safe(site.route_name, pending.tool)

    def _argued(self, obs: Observation, site: CallSite, pending: Pending) -> None:
        """What the rules see of a failed call's arguments: those the tool's listed
        inputSchema requires that the call left out (`match.mcp.missing_required`;
        docs/rules.md#required-arguments), those it takes and the values sent
        (`match.mcp.argument`), and its credentials (`match.mcp.credential_argument`)."""
        if pending.method != "tools/call":
            return
        route = site.route_name
        obs.missing_arguments = self.tools.missing_arguments(route, pending.tool, pending.arguments)
        facts = self.tools.facts(route, pending.tool)
        listed = facts.properties if facts is not None else ()
        obs.arguments = listed + tuple(sorted(pending.arguments.difference(listed)))
        obs.argument_values = pending.values
        obs.credential_arguments = tuple(n for n in obs.arguments if is_credential(n))

    def _renderer(self, ctx: FailureContext, rewrite: Rewrite) -> Render[Outcome]:
        """The step's render function for a JSON-RPC response: nothing changed in `original`
        mode, advisory headers in `headers` mode, the rewritten message in the others."""

        def rendered(verdict: Verdict, recovery: Recovery, _: int) -> Outcome:
            if ctx.mode is Mode.ORIGINAL:
                return Outcome(None, [], verdict)
            failure = verdict.failure
            headers = advisory_headers(failure, recovery, self.enricher.prefix, False)
            if ctx.mode not in UPGRADED_MODES:
                return Outcome(None, headers, verdict)
            payload = _payload(failure, recovery, ctx.request_id)
            return Outcome(rewrite(failure, payload), headers, verdict)

        return rendered


def _observation(
    site: CallSite, pending: Pending, body: bytes, jsonrpc_code: int | None, replay_safe: bool
) -> Observation:
    return Observation(
        route=site.route_name,
        method=CALL_METHOD,
        path=site.path,
        kind=ObservationKind.TOOL_ERROR if jsonrpc_code is None else ObservationKind.JSONRPC_ERROR,
        body=body,
        content_type="application/json" if jsonrpc_code is not None else "text/plain",
        idempotent=replay_safe,
        tool=pending.tool or (None if jsonrpc_code is not None else ""),
        jsonrpc_code=jsonrpc_code,
    )


def tool_error_observation(
    site: CallSite, pending: Pending, text: str, replay_safe: bool | None = None
) -> Observation:
    """A tool error's text items as the rules see them: its UTF-8 bytes, and the text itself.

    The text is handed over rather than decoded again from those bytes (one decode, with
    charset and byte-order-mark checks, per failure): decoding them gives this same text
    unless it begins with a byte order mark, which decoding drops. A lone surrogate (legal
    as a JSON escape) has no UTF-8 form: its bytes are written as they stand and the rules
    read U+FFFD for them, as for any body that is not valid UTF-8.
    """
    safe = site.idempotent if replay_safe is None else replay_safe
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        return _observation(site, pending, text.encode("utf-8", "surrogatepass"), None, safe)
    obs = _observation(site, pending, body, None, safe)
    if not text.startswith(BOM):
        obs.known_text(text)
    return obs


def _failure_context(site: CallSite, pending: Pending) -> FailureContext:
    """`then_retry` names the tool (or the method) the call asked for."""
    situation = Situation(
        operation=pending.tool or pending.method, route=site.route_name, tool=pending.tool
    )
    return site.failure_context(situation)


def _traced_failure(ctx: FailureContext, jsonrpc_code: int | None) -> None:
    """`error.type` on the exchange's span: the JSON-RPC code, or `tool_error` for a tool
    result with `isError` (a success to HTTP, a failure to whoever called the tool)."""
    if ctx.notes is not None:
        ctx.notes.note_mcp_failure(jsonrpc_code)


def _payload(failure: Failure, recovery: Recovery, request_id: str) -> dict[str, Any]:
    return {
        "error": error_object(failure, recovery, request_id),
        "failure": failure_object(failure),
        "recovery": recovery.to_json(),
    }
