"""The failure's fields out of the JSON objects the gateway writes (docs/spec.md, Shapes).

Three places hold them: the `error` object (the envelope, and additive mode when the body
had no `error` or an object one), the `failure` object (always; in additive mode it also
takes every `error` field when the body's own `error` is a string, a list or null), and an
MCP payload `{error, failure, recovery}`. In additive mode the gateway inserts only where a
key is absent, so an upstream's own `error.code` or `error.retryable` may stand where ours
would have gone; the `failure` object, which the upstream did not have, is read first for
`code` and `retryable` for that reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from mendpoint_agents.decision import Fields, Source

FIX_KEYS = ("fix_required", "fix_command", "retry_after_ms")


def is_failure_object(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """The gateway's `failure` object: a category, a code and the retryable flag."""
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("category"), str)
        and isinstance(value.get("code"), str)
        and isinstance(value.get("retryable"), bool)
    )


def is_error_object(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """The gateway's `error` object, whole: every field the ladder reads is a key of it."""
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("retryable"), bool)
        and all(key in value for key in FIX_KEYS)
    )


def body_fields(doc: Any) -> tuple[Fields, Source] | None:
    """The fields of an HTTP body the gateway enriched (envelope or additive), or None."""
    if not isinstance(doc, Mapping):
        return None
    failure = doc.get("failure")
    error = doc.get("error")
    if is_failure_object(failure):
        if all(key in failure for key in FIX_KEYS):  # additive, the body's `error` not an object
            return _fields(failure, failure), Source.ADDITIVE_FAILURE
        details = error if isinstance(error, Mapping) else {}
        source = Source.ENVELOPE if doc.get("ok") is False else Source.ADDITIVE
        return _fields(failure, details), source
    if is_error_object(error):  # the body had a `failure` of its own: ours is only in `error`
        source = Source.ENVELOPE if doc.get("ok") is False else Source.ADDITIVE
        return _fields(error, error), source
    return None


def payload_fields(payload: Any) -> Fields | None:
    """The fields of an MCP payload `{error, failure, recovery}` (a tool result's text item
    or `_meta`, a JSON-RPC error's `data`): its `error` object is the gateway's, whole."""
    if not isinstance(payload, Mapping):
        return None
    error = payload.get("error")
    if is_error_object(error):
        return _fields(error, error)
    failure = payload.get("failure")
    if is_failure_object(failure):
        return _fields(failure, failure)
    return None


def _fields(flags: Mapping[str, Any], details: Mapping[str, Any]) -> Fields:
    """`code` and `retryable` from `flags`; the rest from `details`, falling back to `flags`."""

    def text(key: str) -> str | None:
        value = details.get(key, flags.get(key))
        return value if isinstance(value, str) and value else None

    code = flags.get("code")
    retryable = flags.get("retryable") is True
    delay = details.get("retry_after_ms", flags.get("retry_after_ms"))
    message = text("message") or ""
    return Fields(
        code=code if isinstance(code, str) else None,
        retryable=retryable,
        retry_after_ms=delay if retryable and _is_ms(delay) else None,
        fix_required=text("fix_required"),
        fix_command=text("fix_command"),
        message=message,
    )


def _is_ms(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
