"""JSON-RPC messages as the gateway sees them, and the bounded tables of requests in flight.

A response carries only its request's `id`, so the gateway remembers, per MCP session, which
method (and, for `tools/call`, which tool) each id it forwarded belongs to. A response can then
be tied to its request wherever it arrives: on the POST that sent it, or on a resumed GET
stream. Tables are bounded (oldest entry evicted first) because a client may send requests
that never get an answer; memory never grows with them.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

RequestKey = tuple[bool, str | int]
"""A JSON-RPC id made hashable without letting `1` and `"1"` collide."""

# Responses to these carry the session's contract, never a failure to upgrade (docs/mcp.md).
UNTOUCHED_METHODS = frozenset({"initialize", "server/discover"})

# Built once: `json.dumps` with options builds a new encoder on every call (half its cost on
# a small message). Strict (no NaN or Infinity); the second writes lone surrogates as escapes.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"))
# A tool error (`isError` true, JSON allows whitespace around the colon), a JSON-RPC error or
# a tool list. Keys are matched as written: a quote inside a string is escaped, so a string
# holding these words never matches, and a false match only costs a parse.
VALUES_LIMIT = 8
VALUE_LIMIT = 256
"""A call's argument values kept for its failure's classification: few and short, so a table
of requests in flight stays small (a long value, a file's content, is rarely what a failure
quotes whole)."""
_REWRITABLE = re.compile(rb'"isError"[ \t\n\r]*:[ \t\n\r]*true|"error"|"tools"')


@dataclass(frozen=True, slots=True)
class Pending:
    """What an outstanding request asked for: its method and, for `tools/call`, the tool,
    the names of the arguments it gave (what the tool's inputSchema `required` is checked
    against when the call fails: docs/rules.md#required-arguments) and their short values."""

    method: str
    tool: str | None = None
    arguments: frozenset[str] = frozenset()
    values: tuple[tuple[str, str], ...] = ()
    """The call's string and integer arguments as text, each (name, value): what a failure's
    text may echo (docs/rules.md#arguments-named-in-a-failure). At most `VALUES_LIMIT`, each
    at most `VALUE_LIMIT` characters; longer ones are not kept."""


def request_key(value: Any) -> RequestKey | None:
    """The table key of a JSON-RPC id; None for ids that are not strings or integers."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return (isinstance(value, str), value)


def requests_in(message: Any) -> Iterator[tuple[RequestKey, Pending]]:
    """The requests (not notifications or responses) in one message or a batch."""
    for item in message if isinstance(message, list) else (message,):
        if not isinstance(item, dict):
            continue
        method = item.get("method")
        key = request_key(item.get("id"))
        if not isinstance(method, str) or key is None or method in UNTOUCHED_METHODS:
            continue
        tool = None
        given: frozenset[str] = frozenset()
        values: tuple[tuple[str, str], ...] = ()
        params = item.get("params")
        if method == "tools/call" and isinstance(params, dict):
            name = params.get("name")
            tool = name if isinstance(name, str) else None
            arguments = params.get("arguments")
            if isinstance(arguments, dict) and arguments:
                given = frozenset(arguments)
                values = argument_values(arguments)
        yield key, Pending(method, tool, given, values)


def argument_values(arguments: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A call's string and integer arguments as (name, text), bounded (`Pending.values`)."""
    kept: list[tuple[str, str]] = []
    for name, value in arguments.items():
        if isinstance(value, bool) or not isinstance(value, str | int):
            continue
        if isinstance(value, int) and value.bit_length() > 64:
            continue
        text = value if isinstance(value, str) else str(value)
        if 0 < len(text) <= VALUE_LIMIT and len(name) <= VALUE_LIMIT:
            kept.append((name, text))
            if len(kept) == VALUES_LIMIT:
                break
    return tuple(kept)


def parse_message(raw: bytes | str) -> Any:
    """A JSON value, or None when the text is not JSON (such lines pass through untouched)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def encode(value: Any) -> bytes | None:
    """A message as compact UTF-8 JSON, or None when it cannot be written back as it came.

    Python reads a number past float range (`1e400`) as inf, which is not JSON: such a message
    must go out as the server's bytes. A lone surrogate (`"\\ud800"`, legal as an escape)
    has no UTF-8 form, so a message holding one is written with escapes instead.
    """
    try:
        text = _ENCODER.encode(value)
    except ValueError:
        return None
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _ASCII_ENCODER.encode(value).encode()


def may_be_response(raw: bytes) -> bool:
    """Cheap byte test run before any parsing: could this hold a JSON-RPC response?"""
    return b'"id"' in raw and (b'"result"' in raw or b'"error"' in raw)


def may_need_rewrite(raw: bytes, successes_too: bool = False) -> bool:
    """Could a response need upgrading? A tool error, a JSON-RPC error, or a tool list.

    A successful tool result (`"isError": false` included) answers no: it is relayed as the
    server's bytes without being parsed at all; unless `successes_too` (a rule opted in to
    reading them, docs/rules.md#failures-reported-as-successes), when any result may.
    """
    return _REWRITABLE.search(raw) is not None or (successes_too and b'"result"' in raw)


class RequestTable:
    """Requests awaiting a response, at most `capacity` of them; the oldest is evicted first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._pending: OrderedDict[RequestKey, Pending] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, key: RequestKey, pending: Pending) -> None:
        self._pending[key] = pending
        self._pending.move_to_end(key)
        while len(self._pending) > self.capacity:
            self._pending.popitem(last=False)

    def pop(self, key: RequestKey) -> Pending | None:
        return self._pending.pop(key, None)

    def get(self, key: RequestKey) -> Pending | None:
        return self._pending.get(key)

    def drain(self) -> list[tuple[RequestKey, Pending]]:
        """Everything still pending (e.g. to answer it when the server died), emptying the table."""
        items = list(self._pending.items())
        self._pending.clear()
        return items


class SessionTables:
    """One `RequestTable` per MCP session id, the least recently used session evicted first."""

    def __init__(self, max_sessions: int, per_session: int) -> None:
        self.max_sessions = max_sessions
        self.per_session = per_session
        self._tables: OrderedDict[str, RequestTable] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tables)

    def table(self, session_id: str) -> RequestTable:
        table = self._tables.get(session_id)
        if table is None:
            table = self._tables[session_id] = RequestTable(self.per_session)
            while len(self._tables) > self.max_sessions:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(session_id)
        return table

    def find(self, session_id: str) -> RequestTable | None:
        return self._tables.get(session_id)

    def drop(self, session_id: str) -> None:
        self._tables.pop(session_id, None)


def cancelled_requests(message: Any) -> Iterator[RequestKey]:
    """The ids a client (or server) withdraws with `notifications/cancelled` in a message."""
    for item in message if isinstance(message, list) else (message,):
        if isinstance(item, dict) and item.get("method") == "notifications/cancelled":
            params = item.get("params")
            key = request_key(params.get("requestId") if isinstance(params, dict) else None)
            if key is not None:
                yield key


def responses_in(message: Any) -> Iterator[RequestKey]:
    """The ids answered by the responses in one message or a batch."""
    for item in message if isinstance(message, list) else (message,):
        if (
            isinstance(item, dict)
            and "method" not in item
            and ("result" in item or "error" in item)
        ):
            key = request_key(item.get("id"))
            if key is not None:
                yield key


def progress_tokens(message: Any) -> Iterator[tuple[RequestKey, RequestKey]]:
    """Each request's `params._meta.progressToken` (as a key), by the request's id: progress
    notifications name the token, never the request."""
    for item in message if isinstance(message, list) else (message,):
        if not isinstance(item, dict) or not isinstance(item.get("method"), str):
            continue
        params = item.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        token = request_key(meta.get("progressToken")) if isinstance(meta, dict) else None
        key = request_key(item.get("id"))
        if token is not None and key is not None:
            yield key, token
