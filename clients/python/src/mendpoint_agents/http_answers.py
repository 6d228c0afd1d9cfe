"""Deciding on an HTTP answer in any of the gateway's four modes (docs/spec.md, Shapes).

    mode / case                 where the fields are            Source
    --------------------------  ------------------------------  ------------------
    any 1xx, 2xx, 3xx           (a success passes untouched)    success
    envelope                    `error` (+ `failure`)           envelope
    additive, `error` object    `error`, `failure` for the code additive
    additive, `error` other     `failure`, whole                additive-failure
    headers (or a body that     `X-Error-Code`, `-Retryable`,   headers
    is not a JSON object)       `Retry-After`
    original, or no gateway     nothing: stop with the text     none

The advisory headers only narrow what a body says: when the gateway's `X-Error-Retryable`
says `false`, a body's `retryable: true` (an upstream's own, in additive mode) is not
retried. A `Retry-After` of the upstream's own, in seconds or as an HTTP date, counts only
when the gateway marked the failure retryable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any

from mendpoint_agents.decision import OK, Decision, Fields, Source, choose, stop_with
from mendpoint_agents.fields import body_fields

DEFAULT_PREFIX = "X-Error-"
MAX_TEXT = 2000
"""How much of a body that holds no fields becomes a `stop`'s message."""

Headers = Mapping[str, str] | Iterable[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """An HTTP response as `decide` reads it: status, headers and the whole body."""

    status: int
    headers: Headers
    body: bytes = b""


def decide_http(
    status: int,
    headers: Headers,
    body: bytes,
    *,
    prefix: str = DEFAULT_PREFIX,
    run_fixes: bool = False,
) -> Decision:
    """The decision for one HTTP answer; `prefix` is the route's `headers.prefix`."""
    if status < 400:
        return OK
    names = _lowered(headers)
    said = _header_fields(names, prefix)
    read = body_fields(_json_object(body))
    if read is not None:
        fields, source = read
        if said is not None and not said.retryable and fields.retryable:
            fields = replace(fields, retryable=False, retry_after_ms=None)
        if fields.retryable and fields.retry_after_ms is None:
            fields = replace(fields, retry_after_ms=_retry_after_ms(names))
        return choose(fields, source, run_fixes=run_fixes)
    if said is not None:
        return choose(replace(said, message=_text(body)), Source.HEADERS, run_fixes=run_fixes)
    return stop_with(_text(body) or f"HTTP {status}")


def _header_fields(names: Mapping[str, str], prefix: str) -> Fields | None:
    code = names.get(f"{prefix}code".lower())
    retryable = names.get(f"{prefix}retryable".lower())
    if code is None or retryable is None:
        return None
    is_retryable = retryable.strip().lower() == "true"
    delay = _retry_after_ms(names) if is_retryable else None
    return Fields(code=code.strip(), retryable=is_retryable, retry_after_ms=delay)


def _retry_after_ms(names: Mapping[str, str]) -> int | None:
    """`Retry-After` as milliseconds: delay-seconds, or an HTTP date from now."""
    value = names.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0, int((when.timestamp() - time.time()) * 1000))


def _lowered(headers: Headers) -> dict[str, str]:
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {str(name).lower(): str(value) for name, value in pairs}


def _json_object(body: bytes) -> Any:
    """The body as JSON (any charset JSON allows), or None: an HTML page is no error here."""
    try:
        return json.loads(body)
    except ValueError:
        return None


def _text(body: bytes) -> str:
    return body[:MAX_TEXT].decode("utf-8", "replace").strip()
