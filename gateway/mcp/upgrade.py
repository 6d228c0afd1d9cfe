"""Upgrading one JSON-RPC response: classify with the rules, resolve recovery, rewrite.

Takes a decoded response and the request it answers; returns an `Outcome` (the new message,
or only advisory headers in `headers` mode) or None to send the server's bytes unchanged.
Runs under `enrich_budget_ms`; any exception or overrun means "unchanged" (fail open), so the
gateway never makes an MCP response worse than no gateway.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.classify import Classifier, Observation
from gateway.config.models import McpSpec
from gateway.envelope import advisory_headers, dump, error_object, failure_object
from gateway.failure import Failure, Mode, Recovery
from gateway.mcp.jsonrpc import Pending
from gateway.mcp.rewrite import (
    guided_tools_list,
    is_tool_error,
    tool_error_text,
    tool_failure,
    upgraded_error,
    upgraded_tool_result,
)
from gateway.resolve.callers import Caller
from gateway.resolve.service import RecoveryService, Situation

log = logging.getLogger("mendpoint.mcp")

CALL_METHOD = "POST"
"""The method MCP observations carry: a JSON-RPC call is a POST, whatever the transport."""


class Exchange(Protocol):
    """Who asked and how they want failures delivered; worked out lazily, on failures only."""

    @property
    def route_name(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def mode(self) -> Mode: ...
    @property
    def caller(self) -> Caller: ...
    @property
    def request_id(self) -> str: ...
    @property
    def idempotent(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """A rewritten message (None: keep the bytes) and the advisory headers it earns."""

    message: dict[str, Any] | None
    headers: list[tuple[str, str]]
    failure: Failure | None = None


class Upgrader:
    """Everything an MCP relay needs to upgrade responses, built once per config."""

    def __init__(
        self,
        classifier: Classifier,
        recovery: RecoveryService,
        settings: McpSpec,
        *,
        prefix: str,
        enrich_budget_s: float,
        resolver_budget_s: float,
    ) -> None:
        self.classifier = classifier
        self.recovery = recovery
        self.settings = settings
        self.prefix = prefix
        self.enrich_budget_s = enrich_budget_s
        self.resolver_budget_s = resolver_budget_s

    async def upgrade(self, message: Any, pending: Pending, ex: Exchange) -> Outcome | None:
        """The outcome for a response to `pending`, or None: send it exactly as it came."""
        if not isinstance(message, dict):
            return None
        begun = time.monotonic()
        try:
            async with self.recovery.budget(self.enrich_budget_s):
                outcome = await self._upgrade(message, pending, ex)
        except TimeoutError:
            log.warning("MCP enrichment over budget; original sent request_id=%s", ex.request_id)
            return None
        except Exception:
            log.exception("MCP enrichment failed; original sent request_id=%s", ex.request_id)
            return None
        if time.monotonic() - begun > self.enrich_budget_s:
            return None
        return outcome

    async def _upgrade(
        self, message: dict[str, Any], pending: Pending, ex: Exchange
    ) -> Outcome | None:
        if "error" in message:
            return await self._error(message, pending, ex)
        result = message.get("result")
        if pending.method == "tools/call" and isinstance(result, dict) and is_tool_error(result):
            return await self._tool_error(message, result, pending, ex)
        if pending.method == "tools/list" and ex.mode in (Mode.ADDITIVE, Mode.ENVELOPE):
            guided = guided_tools_list(result, self.settings.guidance)
            return None if guided is None else Outcome({**message, "result": guided}, [])
        return None

    async def _tool_error(
        self, message: dict[str, Any], result: dict[str, Any], pending: Pending, ex: Exchange
    ) -> Outcome | None:
        text = tool_error_text(result)
        obs = self._observation(ex, pending, text.encode("utf-8"), None)
        classified = await self._classify(obs, pending, ex)
        if classified is None:
            return None
        failure, recovery, headers = classified
        if ex.mode not in (Mode.ADDITIVE, Mode.ENVELOPE):
            return Outcome(None, headers, failure)
        payload = self._payload(failure, recovery, ex.request_id)
        extension = (
            tool_failure(failure, ex.request_id) if self.settings.tool_failure_extension else None
        )
        upgraded = upgraded_tool_result(
            result, payload, self.settings.failure_key, extension, self.settings.compact
        )
        return Outcome({**message, "result": upgraded}, headers, failure)

    async def _error(
        self, message: dict[str, Any], pending: Pending, ex: Exchange
    ) -> Outcome | None:
        error = message.get("error")
        if not isinstance(error, dict):
            return None
        code = error.get("code")
        body = dump(error)
        jsonrpc_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        obs = self._observation(ex, pending, body, jsonrpc_code)
        classified = await self._classify(obs, pending, ex)
        if classified is None:
            return None
        failure, recovery, headers = classified
        if ex.mode not in (Mode.ADDITIVE, Mode.ENVELOPE):
            return Outcome(None, headers, failure)
        upgraded = upgraded_error(error, self._payload(failure, recovery, ex.request_id))
        if upgraded is None:
            return Outcome(None, headers, failure)
        return Outcome({**message, "error": upgraded}, headers, failure)

    def _observation(
        self, ex: Exchange, pending: Pending, body: bytes, jsonrpc_code: int | None
    ) -> Observation:
        return Observation(
            route=ex.route_name,
            method=CALL_METHOD,
            path=ex.path,
            body=body,
            content_type="application/json" if jsonrpc_code is not None else "text/plain",
            idempotent=ex.idempotent,
            tool=pending.tool or (None if jsonrpc_code is not None else ""),
            jsonrpc_code=jsonrpc_code,
        )

    async def _classify(
        self, obs: Observation, pending: Pending, ex: Exchange
    ) -> tuple[Failure, Recovery, list[tuple[str, str]]] | None:
        if ex.mode is Mode.ORIGINAL:
            return None
        verdict = self.classifier.classify(obs)
        if verdict is None:
            return None
        failure = verdict.failure
        recovery = await self._recover(failure, pending, ex)
        return failure, recovery, advisory_headers(failure, recovery, self.prefix, False)

    async def _recover(self, failure: Failure, pending: Pending, ex: Exchange) -> Recovery:
        situation = Situation(
            operation=pending.tool or pending.method, route=ex.route_name, tool=pending.tool
        )
        return await self.recovery.recover_within(
            self.resolver_budget_s, failure, ex.caller, situation, ex.request_id
        )

    @staticmethod
    def _payload(failure: Failure, recovery: Recovery, request_id: str) -> dict[str, Any]:
        return {
            "error": error_object(failure, recovery, request_id),
            "failure": failure_object(failure),
            "recovery": recovery.to_json(),
        }
