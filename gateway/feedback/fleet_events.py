"""What one replica accepts from the others through the fleet store
(docs/security.md#fleet-store).

Anyone who can write to the Redis a fleet shares can publish on its events channel and set
its keys, and a replica used to apply whatever arrived: a forged `open` with
`retry_after_ms: "soon"` made a caller's retry a 500, 1 MB keys grew a replica past
`followups.max_bytes`, forged `hints` made any tool safe to retry, and route and code strings
read from the store became Prometheus labels without a bound. Two defences, both needed:

- What a replica writes for the others is sealed (`seal`): an HMAC with the fleet key
  (`fleet.key_file`) over its purpose, the time it was written and its text. What is not
  sealed with a key of this fleet is dropped before it is read (`unseal`). The key never
  reaches Redis: the batch script hands back the messages it would have published, and the
  gateway seals and publishes them itself.
- Sealing cannot vouch for what the scripts read back from keys anyone could have set (an
  open failure stored under `{p}:fu:open:…` is published again when it is settled), so every
  event and every value read from the store is checked field by field before it reaches a
  book or a label: types, sizes, routes this config names, codes of the rule language's shape.

What fails either check is dropped and counted in
`mendpoint_fleet_rejected_total{what, reason}`, both labels from closed sets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection
from typing import Any, Literal

import regex

from gateway.config.model_base import _CODE
from gateway.config.session_keys import SessionKeys
from gateway.telemetry.metrics import FLEET_REJECTED

SEP = "\x1f"
What = Literal["event", "tally", "gap", "relay_record"]
Reason = Literal[
    "unsigned", "bad_signature", "stale", "oversized", "malformed", "unknown_route", "bad_field"
]
MAX_MESSAGE_CHARS = 4 << 20
"""One published batch: 128 writes' events are about 80 KB; a `tools/list` of many tools more."""
MAX_EVENTS = 1024
MAX_AGE_MS = 300_000
"""A sealed message older than this is a replay: the channel delivers in milliseconds, and
machines' clocks agree within seconds where NTP runs."""
MAX_TOOLS = 1024
MAX_REQUIRED = 64
MAX_NAME = 128
MAX_RETRY_AFTER_MS = 86_400_000
MAX_WALL_MS = 1 << 53

_DIGEST = regex.compile(r"[0-9a-f]{32}")
_REPLICA = regex.compile(r"(?:[0-9a-f]{16})?")
_RULE = regex.compile(r"[A-Za-z0-9_.:\-]{0,128}")
_ROUTE = regex.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_REQUEST_ID = regex.compile(r"[\x21-\x7e]{1,200}")


class Rejected(Exception):
    """A message or value not to apply, and why."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason: Reason = reason


def rejected(what: What, reason: Reason) -> None:
    FLEET_REJECTED.labels(what=what, reason=reason).inc()


# -- sealing ------------------------------------------------------------------------------


def seal(keys: SessionKeys, purpose: str, text: str, now_ms: int | None = None) -> str:
    """`text` as another replica can trust it: `<mac> SEP <ms> SEP <text>`."""
    written = str(round(time.time() * 1000) if now_ms is None else now_ms)
    mac = keys.sign_shared(_sealed_data(purpose, written, text))
    return f"{mac}{SEP}{written}{SEP}{text}"


def unseal(
    keys: SessionKeys, purpose: str, sealed: str, max_age_ms: int | None = MAX_AGE_MS
) -> str:
    """The text of a message `seal` made with a key of this fleet for `purpose`; Rejected
    when it is not one."""
    mac, sep, rest = sealed.partition(SEP)
    written, sep2, text = rest.partition(SEP)
    if not sep or not sep2 or not written.isdigit() or len(written) > 16:
        raise Rejected("unsigned")
    if not keys.shared_valid(_sealed_data(purpose, written, text), mac):
        raise Rejected("bad_signature")
    if max_age_ms is not None and abs(time.time() * 1000 - int(written)) > max_age_ms:
        raise Rejected("stale")
    return text


def _sealed_data(purpose: str, written: str, text: str) -> bytes:
    return f"{purpose}{SEP}{written}{SEP}{text}".encode("utf-8", "surrogatepass")


# -- what an event may hold ---------------------------------------------------------------


def event_problem(event: object, routes: Collection[str]) -> Reason | None:
    """Why another replica's event must not be applied here, or None when it may."""
    if not isinstance(event, dict):
        return "malformed"
    if not _is_str(event.get("from"), _REPLICA):
        return "bad_field"
    op = event.get("op")
    if op == "open":
        return entry_problem(event.get("entry"), routes)
    if op == "close":
        ok = _is_str(event.get("key"), _DIGEST) and _is_str(event.get("request_id"), _REQUEST_ID)
        return None if ok else "bad_field"
    if op == "hints":
        return hints_problem(event.get("route"), event.get("tools"), routes)
    return "malformed"


def entry_problem(entry: object, routes: Collection[str]) -> Reason | None:
    """An open failure as `SharedTracking.opened` writes it: every field of its type and size,
    its route one this config names."""
    if not isinstance(entry, dict):
        return "malformed"
    route = entry.get("route")
    if not isinstance(route, str):
        return "bad_field"
    if route not in routes:
        return "unknown_route"
    checks = (
        _is_str(entry.get("key"), _DIGEST),
        _is_str(entry.get("identity"), _DIGEST),
        _is_str(entry.get("request_id"), _REQUEST_ID),
        code_ok(entry.get("code")),
        _is_str(entry.get("rule"), _RULE),
        isinstance(entry.get("retryable"), bool),
        _is_int(entry.get("retry_after_ms"), MAX_RETRY_AFTER_MS),
        all(
            _is_time(entry.get(name))
            for name in ("answered_wall_ms", "chain_wall_ms", "started_wall_ms")
        ),
    )
    return None if all(checks) else "bad_field"


def hints_problem(route: object, tools: object, routes: Collection[str]) -> Reason | None:
    """What a `tools/list` said of a route's tools (gateway.mcp.tool_hints.ToolBook.learn)."""
    if not isinstance(route, str) or not isinstance(tools, dict):
        return "malformed"
    if route not in routes:
        return "unknown_route"
    if len(tools) > MAX_TOOLS:
        return "oversized"
    for name, told in tools.items():
        if not (isinstance(name, str) and 0 < len(name) <= MAX_NAME and isinstance(told, dict)):
            return "bad_field"
        if not isinstance(told.get("replay_safe"), bool):
            return "bad_field"
        required = told.get("required")
        if not isinstance(required, list) or len(required) > MAX_REQUIRED:
            return "bad_field"
        if not all(isinstance(n, str) and 0 < len(n) <= MAX_NAME for n in required):
            return "bad_field"
    return None


# -- values read back from the store ------------------------------------------------------


def code_ok(code: object) -> bool:
    """An error code of the rule language's shape (UPPER_SNAKE, at most 64 characters)."""
    return isinstance(code, str) and len(code) <= 64 and _CODE.match(code) is not None


def route_shaped(route: object) -> bool:
    """A route name as the config allows one (the store's tables outlive a rename)."""
    return _is_str(route, _ROUTE)


def label_problem(route: object, code: object, routes: Collection[str]) -> Reason | None:
    """Why a (route, code) the store answered must not become a Prometheus label: only this
    config's routes and codes of the right shape do, so a label set stays bounded."""
    if not isinstance(route, str) or not code_ok(code):
        return "bad_field"
    return None if route in routes else "unknown_route"


def _is_str(value: object, pattern: regex.Pattern[str]) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def _is_int(value: object, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


def _is_time(value: Any) -> bool:
    """Unix milliseconds as JSON gives them: an int, or a float from a Lua script."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and 0 <= value <= MAX_WALL_MS


__all__ = [
    "MAX_EVENTS",
    "MAX_MESSAGE_CHARS",
    "MAX_TOOLS",
    "Rejected",
    "code_ok",
    "entry_problem",
    "event_problem",
    "hints_problem",
    "label_problem",
    "rejected",
    "route_shaped",
    "seal",
    "unseal",
]
