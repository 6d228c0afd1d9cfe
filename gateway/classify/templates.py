"""Turning a matched rule into a `Failure`: templates, upstream message, retry delay.

Everything that came from the upstream is treated as untrusted text: it is cut and stripped
of control characters before it reaches a message, and it can never reach `fix_command`,
which is looked up in the registry by id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from gateway.classify.fields import extract_fields, summary
from gateway.classify.html_message import (
    html_message,
    looks_like_html,
    looks_like_plain_text,
    looks_like_xml,
    says_only_status,
    text_message,
    xml_message,
)
from gateway.classify.observation import Observation
from gateway.classify.retry_hints import hinted_delay_ms, parse_duration_ms, parse_retry_after
from gateway.config.jsonpath import JsonPath, parse_json_path
from gateway.config.rule_model import RetryAfterSpec
from gateway.failure import Failure
from gateway.text.safe_text import clean_text

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
    retry_after = retry_delay_ms(rule, obs, captures) if retryable else None
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
        suggestion=error.suggestion.format_map(values) if error.suggestion else None,
        recovery_intent=error.recovery_intent,
        rule_id=rule.id,
        from_default_rule=rule.is_default,
        fields=fields,
    )


def upstream_message(obs: Observation, message_paths: tuple[JsonPath, ...]) -> str:
    """The upstream's own message at the first configured JSON path holding a string that
    says more than a status ("Conflict", "409 Conflict" are passed over for a later path's
    words, and kept only when no path has any:
    docs/rules.md#message_paths-and-extra_message_paths-config).

    A path with wildcards (`detail[*].msg`) joins the strings it reaches with "; ". A body
    that is a JSON string is the message. An HTML error page gives its heading and first
    paragraph (`html_message`), an XML error document its `<Message>`, `<faultstring>` or
    `<Reason>` (`xml_message`), a plain-text body its first line past any banner
    (`text_message`).
    """
    body = obs.json
    if isinstance(body, dict | list):
        phrase: str | None = None
        for path in message_paths:
            found = message_at(path, body)
            if found and not says_only_status(found):
                return _with_details(found, body) if obs.tool is not None else found
            phrase = phrase or found
        if phrase:
            return phrase
    if isinstance(body, str) and body.strip() and obs.tool is None:
        # A bare JSON string is the message itself (`"quantity must be positive"`, as
        # `JSON.stringify(message)` and a framework's string return value send it).
        return body
    text = obs.text
    if text and body is None and looks_like_html(obs.content_type, text):
        page = html_message(text)
        if page:
            return page
    if text and body is None and obs.tool is None and looks_like_xml(obs.content_type, text):
        found_xml = xml_message(text)
        if found_xml:
            return found_xml
    if obs.tool is not None and obs.jsonrpc_code is None and obs.text and obs.text.strip():
        return obs.text  # an MCP tool error: its text items are the server's own message
    http_text = body is None and obs.status is not None and obs.tool is None
    if text and http_text and looks_like_plain_text(obs.content_type, text):
        line = text_message(text)
        if line:
            return line
    if obs.transport is not None:
        return _TRANSPORT_MESSAGES[obs.transport.value]
    if obs.status is not None:
        try:
            return HTTPStatus(obs.status).phrase
        except ValueError:
            return f"HTTP {obs.status}"
    return "Request failed"


def _with_details(message: str, body: Any) -> str:
    """An MCP tool's envelope keeps its cause in `details` beside a summary `message` (AWS
    Labs' servers: "AWS service connection error: EndpointConnectionError" and botocore's
    "Could not connect to the endpoint URL: …"): both, when `details` is a string the
    message does not already hold."""
    details = body.get("details") if isinstance(body, dict) else None
    if not isinstance(details, str) or not details.strip() or details.strip() in message:
        return message
    return f"{message}: {details.strip()}"


def message_at(path: JsonPath, body: Any) -> str | None:
    """The message at one path: its string, or a wildcard's strings joined with "; "."""
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
    "tls": "TLS with the upstream failed (its certificate, name or protocol was refused)",
}


def _may_repeat_side_effect(rule: CompiledRule, obs: Observation) -> bool:
    """A non-idempotent request that may have reached the upstream is never retryable.

    Unless the caller sent an `Idempotency-Key`: it declared the identical request safe to
    repeat (docs/rules.md#side-effects-and-idempotency-key).
    """
    if obs.replay_safe or rule.error.side_effect_free:
        return False
    return obs.transport is None or not obs.transport.request_unsent


def retry_delay_ms(rule: CompiledRule, obs: Observation, captures: Mapping[str, str]) -> int | None:
    """The rule's retry delay for this exchange (of a retryable failure). Reads the clock
    (`obs.now`) only for a hint given as an instant; the answer cache works a kept answer's
    delay out again with this when it did."""
    return _retry_after_ms(rule.error.retry_after_ms, obs, captures)


def _retry_after_ms(
    spec: int | RetryAfterSpec | None, obs: Observation, captures: Mapping[str, str]
) -> int | None:
    if spec is None or isinstance(spec, int):
        return spec
    found: float | None = None
    if spec.header is not None:
        found = parse_retry_after(obs.headers.get(spec.header), obs.now)
    if found is None and spec.json_ is not None:
        value = parse_json_path(spec.json_).get(obs.json)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            found = value * 1000 if spec.unit == "s" else value
    if found is None and spec.capture is not None:
        found = parse_duration_ms(captures.get(spec.capture), spec.unit)
    if found is None and spec.hints:
        found = hinted_delay_ms(obs)
    if found is None:
        return spec.default
    return min(math.ceil(found), MAX_RETRY_AFTER_MS)


__all__ = [
    "build_failure",
    "clean_text",
    "parse_duration_ms",
    "parse_retry_after",
    "retry_delay_ms",
    "upstream_message",
]
