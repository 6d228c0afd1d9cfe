"""The weakest agent: the four-line decision procedure of docs/spec.md#what-the-agent-does.

It reads only what the gateway's additive mode gives it: over HTTP the JSON body's `error`
object (or `failure`, where the upstream's own `error` is not an object), else the advisory
`X-Error-*` headers when the body is not JSON; over MCP the appended `mendpoint_failure` text
item, `result._meta["mendpoint/failure"]`, or a JSON-RPC error's `error.data`. Nothing to read
means it stops, as the procedure's last line says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.first_action.model import Action

FAILURE_KEY = "mendpoint_failure"
META_KEY = "mendpoint/failure"


@dataclass(frozen=True)
class Reading:
    """What the agent found: the action it takes, from where, and the error fields."""

    action: Action
    source: str
    error: Mapping[str, Any]

    @property
    def message(self) -> str:
        value = self.error.get("message")
        return value if isinstance(value, str) else ""

    @property
    def code(self) -> str:
        return str(self.error.get("code", ""))

    def summary(self) -> str:
        """One line for a miss: what the gateway said."""
        keys = ("code", "retryable", "retry_after_ms", "fix_required", "fix_command", "message")
        parts = [f"{k}={self.error[k]!r}" for k in keys if self.error.get(k) is not None]
        return f"[{self.source}] " + ", ".join(parts) if parts else f"[{self.source}] nothing"


def decide(error: Mapping[str, Any]) -> Action:
    """The procedure itself."""
    if error.get("retryable") is True:
        return "retry"
    if error.get("fix_command"):
        return "run_fix"
    if error.get("fix_required"):
        return "fix"
    return "stop"


def read_http(headers: Mapping[str, str], body: bytes) -> Reading:
    """The agent's reading of an HTTP failure answer (header names lower-cased)."""
    parsed = _json(body)
    if isinstance(parsed, dict):
        for key in ("error", "failure"):
            candidate = parsed.get(key)
            if isinstance(candidate, dict) and "retryable" in candidate:
                return Reading(decide(candidate), f"body.{key}", candidate)
    retryable = headers.get("x-error-retryable", "").lower()
    if retryable:
        recoverable = headers.get("x-error-recoverable", "").lower() == "true"
        fields: dict[str, Any] = {"code": headers.get("x-error-code", "")}
        if retryable == "true":
            return Reading("retry", "headers", fields | {"retryable": True})
        if recoverable:
            return Reading("fix", "headers", fields | {"fix_required": "(X-Error-Recoverable)"})
        return Reading("stop", "headers", fields)
    return Reading("stop", "none", {})


def read_mcp(message: Mapping[str, Any]) -> Reading | None:
    """The agent's reading of a JSON-RPC response; None when it is a success."""
    error = message.get("error")
    if isinstance(error, dict):
        data = error.get("data")
        if isinstance(data, dict) and isinstance(data.get(META_KEY), dict):
            return _from_failure(data[META_KEY], "error.data")
        return Reading("stop", "none", {"message": str(error.get("message", ""))})
    result = message.get("result")
    if not isinstance(result, dict) or result.get("isError") is not True:
        return None
    for item in reversed(result.get("content") or []):
        if isinstance(item, dict) and item.get("type") == "text":
            parsed = _json(str(item.get("text", "")).encode())
            if isinstance(parsed, dict) and isinstance(parsed.get(FAILURE_KEY), dict):
                return _from_failure(parsed[FAILURE_KEY], "content")
    meta = result.get("_meta")
    if isinstance(meta, dict) and isinstance(meta.get(META_KEY), dict):
        return _from_failure(meta[META_KEY], "_meta")
    return Reading("stop", "none", {})


def _from_failure(failure: Mapping[str, Any], source: str) -> Reading:
    error = failure.get("error")
    if not isinstance(error, dict):
        return Reading("stop", source, {})
    return Reading(decide(error), source, error)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


_SPACE = re.compile(r"\s+")


def normalised(text: str) -> str:
    """Case and runs of whitespace do not count when words are looked for."""
    return _SPACE.sub(" ", text).strip().casefold()


def words_kept(words: list[str], message: str) -> bool:
    have = normalised(message)
    return all(normalised(word) in have for word in words)
