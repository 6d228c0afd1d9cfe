"""Retry hints: how long the upstream asked callers to wait, from every common source.

Takes an `Observation` (its headers, JSON body or MCP text) and returns milliseconds, or
None when the upstream gave no hint. The sources, most precise first:

| source | example |
|---|---|
| `retry-after-ms` (OpenAI, Azure) | `retry-after-ms: 1500` |
| `Retry-After` (RFC 9110) | `Retry-After: 30` or an HTTP-date |
| AIP-193 `google.rpc.RetryInfo` | `error.details[].retryDelay: "30s"` |
| IETF `RateLimit` (draft) | `RateLimit: "default";r=0;t=30`, `RateLimit-Reset: 30` |
| `x-ratelimit-reset` | seconds, or a Unix time (GitHub), or `6m0s` |
| a JSON body's own delay (an MCP envelope) | `retry_after_ms: 1500`, `retry_after_seconds: 30` |

An MCP tool error's text ("retry after 30 seconds") is read by rules instead, through
`retry_after_ms.capture` and `parse_duration_ms`.

Every parser refuses what it does not understand (None) rather than guessing wide.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import regex

from gateway.classify.observation import Observation
from gateway.config.jsonpath import parse_json_path

UNIX_TIME_FLOOR = 1_000_000_000  # a reset this large is a Unix time, not a delay (2001+)
UNIX_MS_FLOOR = 1_000_000_000_000
RETRY_INFO = "google.rpc.RetryInfo"
_DETAILS = tuple(
    parse_json_path(p) for p in ("error.details[*]", "details[*]", "[*].error.details[*]")
)
_DURATION = regex.compile(r"(?:(\d+(?:\.\d+)?)(ms|h|m|s))+\Z")
_DURATION_PART = regex.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
BODY_DELAYS = tuple(
    (parse_json_path(path), factor)
    for key, factor in (
        ("retry_after_ms", 1.0),
        ("retryAfterMs", 1.0),
        ("retry_after_seconds", 1000.0),
        ("retryAfterSeconds", 1000.0),
        ("retry_after", 1000.0),
        ("retryAfter", 1000.0),
    )
    for path in (key, f"error.{key}")
)
"""A JSON body's own delay, top level or under `error`: the keys of the error envelopes MCP
servers and their frameworks write (docs/rules.md#the-servers-own-envelope), a bare
`retry_after` in seconds as Retry-After counts."""
HINT_HEADERS = (
    "retry-after-ms",
    "Retry-After",
    "RateLimit",
    "RateLimit-Reset",
    "X-RateLimit-Reset",
    "X-Rate-Limit-Reset",
)
"""Every response header `hinted_delay_ms` may read (the answer cache keys on them)."""
Clock = Callable[[], float]
"""The current Unix time, read only when a hint is an instant rather than a delay."""


def hinted_delay_ms(obs: Observation, now: float | None = None) -> float | None:
    """The first retry hint the upstream gave, in milliseconds, or None.

    The clock is read (`Observation.now`) only for a hint given as an instant (an HTTP-date,
    a Unix time), so a verdict built from a delay alone stays the same for the same answer.
    """
    clock: Clock = obs.now if now is None else _fixed(now)
    headers = obs.headers
    for source in _HEADER_SOURCES:
        found = source(headers, clock)
        if found is not None:
            return found
    if obs.body is not None:
        found = retry_info_ms(obs.json)
        if found is None:
            found = body_delay_ms(obs.json)
        if found is not None:
            return found
    for source in _LATE_HEADER_SOURCES:
        found = source(headers, clock)
        if found is not None:
            return found
    return None


def body_delay_ms(body: Any) -> float | None:
    """The first of `BODY_DELAYS` a JSON object holds as a non-negative number."""
    if not isinstance(body, dict):
        return None
    for path, factor in BODY_DELAYS:
        value = path.get(body)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and math.isfinite(value) and value >= 0:
            return float(value) * factor
    return None


def parse_retry_after(value: str | None, now: float | Clock | None = None) -> float | None:
    """`Retry-After` as milliseconds: delay-seconds or an HTTP-date; None if unparseable.

    `now` (an instant or a function giving one) is read only for an HTTP-date."""
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
    instant = time.time() if now is None else now() if callable(now) else now
    delta = when.timestamp() - instant
    return max(delta, 0.0) * 1000.0


def retry_info_ms(body: Any) -> float | None:
    """AIP-193: the `retryDelay` of a `google.rpc.RetryInfo` detail (`"1.5s"` or an object)."""
    if not isinstance(body, dict | list):
        return None
    for path in _DETAILS:
        for detail, _ in path.find(body):
            if not isinstance(detail, dict):
                continue
            kind = detail.get("@type")
            if isinstance(kind, str) and kind.endswith(RETRY_INFO):
                return _proto_duration_ms(detail.get("retryDelay"))
    return None


def ratelimit_ms(headers: Mapping[str, str], clock: Clock) -> float | None:
    """The IETF RateLimit fields: `RateLimit: "p";r=0;t=30` (draft 07+) or the older
    `RateLimit: limit=10, remaining=0, reset=30` and `RateLimit-Reset: 30`."""
    value = headers.get("RateLimit")
    if value is not None:
        waits: list[float] = []
        for item in value.split(","):
            head, *rest = item.split(";")
            key, number = _param(head)
            params = dict(_param(p) for p in rest if "=" in p)
            if key == "reset":
                waits.append(_seconds(number))
            elif "t" in params and params.get("r", "0") == "0":  # only an exhausted quota
                waits.append(_seconds(params["t"]))
        usable = [w for w in waits if w >= 0]
        if usable:
            return max(usable) * 1000.0
    reset = headers.get("RateLimit-Reset")
    seconds = _seconds(reset) if reset is not None else -1.0
    return seconds * 1000.0 if seconds >= 0 else None


def x_ratelimit_reset_ms(headers: Mapping[str, str], clock: Clock) -> float | None:
    """`x-ratelimit-reset`: delay seconds, a Unix time (s or ms), or a duration (`6m0s`)."""
    for name in ("X-RateLimit-Reset", "X-Rate-Limit-Reset"):
        value = headers.get(name)
        if value is None:
            continue
        text = value.strip()
        duration = _duration_ms(text)
        if duration is not None:
            return duration
        number = _seconds(text)
        if number < 0:
            continue
        if number >= UNIX_MS_FLOOR:
            return max(number / 1000 - clock(), 0.0) * 1000.0
        if number >= UNIX_TIME_FLOOR:
            return max(number - clock(), 0.0) * 1000.0
        return number * 1000.0
    return None


_DURATION_WORDS = regex.compile(
    r"(?i)^\s*(?P<n>\d{1,9}(?:\.\d{1,6})?)\s*"
    r"(?P<unit>ms|msecs?|millis(?:econds?)?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)?\.?\s*$"
)


def parse_duration_ms(value: str | None, unit: str = "s") -> float | None:
    """A duration as people write it ("30 seconds", "12s", "500 ms", "2 minutes", "1.5h") in
    milliseconds; a bare number is in `unit` (s or ms). None when it is not one."""
    found = _DURATION_WORDS.match(value) if value is not None else None
    if found is None:
        return None
    word = (found["unit"] or unit).lower()
    scale = 1.0 if word.startswith(("ms", "mil")) else _UNIT_MS[word[0]]
    return float(found["n"]) * scale


def _retry_after_ms_header(headers: Mapping[str, str], clock: Clock) -> float | None:
    value = headers.get("retry-after-ms")
    number = _seconds(value) if value is not None else -1.0
    return number if number >= 0 else None


def _retry_after_header(headers: Mapping[str, str], clock: Clock) -> float | None:
    return parse_retry_after(headers.get("Retry-After"), clock)


def _fixed(now: float) -> Clock:
    return lambda: now


HeaderSource = Callable[[Mapping[str, str], Clock], float | None]
_HEADER_SOURCES: tuple[HeaderSource, ...] = (_retry_after_ms_header, _retry_after_header)
_LATE_HEADER_SOURCES: tuple[HeaderSource, ...] = (ratelimit_ms, x_ratelimit_reset_ms)


def _param(text: str) -> tuple[str, str]:
    key, _, value = text.strip().partition("=")
    return key.strip().lower(), value.strip().strip('"')


def _seconds(text: str) -> float:
    """A non-negative decimal number, or -1 for anything else."""
    try:
        number = float(text.strip())
    except ValueError:
        return -1.0
    return number if number >= 0 and math.isfinite(number) else -1.0


def _duration_ms(text: str) -> float | None:
    """A Go-style duration (`1s`, `6m0s`, `20ms`), as OpenAI's reset headers send."""
    if not _DURATION.match(text):
        return None
    return sum(float(n) * _UNIT_MS[u] for n, u in _DURATION_PART.findall(text))


def _proto_duration_ms(value: Any) -> float | None:
    if isinstance(value, str) and value.endswith("s"):
        seconds = _seconds(value[:-1])
        return seconds * 1000.0 if seconds >= 0 else None
    if isinstance(value, dict):
        seconds, nanos = value.get("seconds", 0), value.get("nanos", 0)
        if isinstance(seconds, str):
            seconds = _seconds(seconds)
        if isinstance(seconds, int | float) and isinstance(nanos, int) and seconds >= 0:
            return float(seconds) * 1000.0 + nanos / 1e6
    return None


__all__ = [
    "HINT_HEADERS",
    "body_delay_ms",
    "hinted_delay_ms",
    "parse_duration_ms",
    "parse_retry_after",
    "retry_info_ms",
]
