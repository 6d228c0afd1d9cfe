"""Turning a matched rule into a `Failure`: templates, upstream message, retry delay.

Everything that came from the upstream is treated as untrusted text: it is cut and stripped
of control characters before it reaches a message, and it can never reach `fix_command`,
which is looked up in the registry by id.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import regex

from gateway.classify.fields import extract_fields, summary
from gateway.classify.observation import Observation, json_path_get, split_json_path
from gateway.classify.text import clean_text
from gateway.config.jsonpath import JsonPath
from gateway.config.models import RetryAfterSpec
from gateway.failure import Failure

if TYPE_CHECKING:
    from gateway.classify.rules import CompiledRule

CAPTURE_LIMIT = 200
MESSAGE_LIMIT = 1000
MAX_RETRY_AFTER_MS = 24 * 3600 * 1000
UPSTREAM_MESSAGE_PARTS = 10  # a wildcard message path joins at most this many strings


def build_failure(
    rule: CompiledRule,
    obs: Observation,
    captures: Mapping[str, str],
    commands: Mapping[str, str],
    message_paths: tuple[JsonPath, ...],
) -> Failure:
    error = rule.error
    values = {k: clean_text(v, CAPTURE_LIMIT) for k, v in captures.items()}
    values.update(
        status=str(obs.status or ""), method=obs.method, path=clean_text(obs.path, CAPTURE_LIMIT)
    )
    fields, total = extract_fields(rule.fields, obs.json) if rule.fields else ((), 0)
    if rule.fields:
        values["fields"] = summary(fields, total)
    retryable = error.retryable and not _may_repeat_side_effect(rule, obs)
    retry_after = _retry_after_ms(error.retry_after_ms, obs, captures) if retryable else None
    if error.message is not None:
        message = error.message.format_map(values)
    elif fields:
        message = values["fields"]  # a message that names every field it can
    else:
        message = upstream_message(obs, message_paths)
    return Failure(
        code=error.code,
        category=error.category,
        message=clean_text(message, MESSAGE_LIMIT),
        retryable=retryable,
        retry_after_ms=retry_after,
        fix_required=error.fix_required.format_map(values) if error.fix_required else None,
        fix_command=commands[error.fix_command] if error.fix_command else None,
        suggestion=error.suggestion,
        recovery_intent=error.recovery_intent,
        rule_id=rule.id,
        from_default_rule=rule.is_default,
        fields=fields,
    )


def upstream_message(obs: Observation, message_paths: tuple[JsonPath, ...]) -> str:
    """The upstream's own message at the first configured JSON path holding a string.

    A path with wildcards (`detail[*].msg`) joins the strings it reaches with "; ".
    """
    body = obs.json
    if isinstance(body, dict | list):
        for path in message_paths:
            found = _message_at(path, body)
            if found:
                return found
    if obs.tool is not None and obs.jsonrpc_code is None and obs.text and obs.text.strip():
        return obs.text  # an MCP tool error: its text items are the server's own message
    if obs.transport is not None:
        return _TRANSPORT_MESSAGES[obs.transport.value]
    if obs.status is not None:
        try:
            return HTTPStatus(obs.status).phrase
        except ValueError:
            return f"HTTP {obs.status}"
    return "Request failed"


def _message_at(path: JsonPath, body: Any) -> str | None:
    if path.literal:
        value = path.get(body)
        return value if isinstance(value, str) and value.strip() else None
    texts: list[str] = []
    for value, _ in path.find(body):
        if isinstance(value, str) and value.strip() and value not in texts:
            texts.append(value.strip())
            if len(texts) == UPSTREAM_MESSAGE_PARTS:
                break
    return "; ".join(texts) or None


_TRANSPORT_MESSAGES = {
    "connect_refused": "The upstream refused the connection",
    "connect_timeout": "Connecting to the upstream timed out",
    "dns_failure": "The upstream host name could not be resolved",
    "read_timeout": "The upstream did not answer in time",
    "reset": "The upstream closed the connection before answering",
    "invalid_response": "The upstream sent an invalid HTTP response",
}


def _may_repeat_side_effect(rule: CompiledRule, obs: Observation) -> bool:
    """A non-idempotent request that may have reached the upstream is never retryable.

    Unless the caller sent an `Idempotency-Key`: it declared the identical request safe to
    repeat (docs/rules.md#side-effects).
    """
    if obs.replay_safe or rule.error.side_effect_free:
        return False
    return obs.transport is None or not obs.transport.request_unsent


def _retry_after_ms(
    spec: int | RetryAfterSpec | None, obs: Observation, captures: Mapping[str, str]
) -> int | None:
    if spec is None or isinstance(spec, int):
        return spec
    found: float | None = None
    if spec.header is not None:
        found = parse_retry_after(obs.headers.get(spec.header))
    if found is None and spec.json_ is not None:
        value = json_path_get(obs.json, split_json_path(spec.json_))
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            found = value * 1000 if spec.unit == "s" else value
    if found is None and spec.capture is not None:
        found = parse_duration_ms(captures.get(spec.capture), spec.unit)
    if found is None:
        return spec.default
    return min(math.ceil(found), MAX_RETRY_AFTER_MS)


_DURATION = regex.compile(
    r"(?i)^\s*(?P<n>\d{1,9}(?:\.\d{1,6})?)\s*"
    r"(?P<unit>ms|msecs?|millis(?:econds?)?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)?\.?\s*$"
)
_UNIT_MS = {"s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def parse_duration_ms(value: str | None, unit: str = "s") -> float | None:
    """A duration as people write it ("30 seconds", "12s", "500 ms", "2 minutes", "1.5h") in
    milliseconds; a bare number is in `unit` (s or ms). None when it is not one."""
    found = _DURATION.match(value) if value is not None else None
    if found is None:
        return None
    word = (found["unit"] or unit).lower()
    scale = 1.0 if word.startswith(("ms", "mil")) else _UNIT_MS[word[0]]
    return float(found["n"]) * scale


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` as milliseconds: delay-seconds or an HTTP-date; None if unparseable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000.0
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    delta = when.timestamp() - (time.time() if now is None else now)
    return max(delta, 0.0) * 1000.0


__all__ = [
    "build_failure",
    "clean_text",
    "parse_duration_ms",
    "parse_retry_after",
    "upstream_message",
]
