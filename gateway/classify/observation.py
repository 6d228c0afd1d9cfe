"""What the classifier looks at: one failed exchange, with its body decoded at most once.

The proxy builds an `Observation` only on the error path. Decoding the body as text and
parsing it as JSON happen lazily and are cached, so a thousand body rules cost one decode.
Each observation says what failed (`ObservationKind`), set where it is built: the classifier
dispatches on that once to the rules written for such failures (`engine.py`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.classify.sdk_wrappers import inner_message
from gateway.failure import Refusal, TransportKind
from gateway.text.body_text import declared_text

_UNSET: Any = object()
IDEMPOTENCY_KEY = "Idempotency-Key"
"""The request header by which a caller declares a request safe to repeat (IETF draft)."""


def carries_idempotency_key(headers: Mapping[str, str]) -> bool:
    """True when the caller sent a non-blank `Idempotency-Key` (an empty one declares nothing)."""
    return bool(headers.get(IDEMPOTENCY_KEY, "").strip())


class ObservationKind(StrEnum):
    """What failed, which decides the rules tried on it (the classifier's one dispatch).

    The fields an observation carries follow from its kind: `status` (and the response's
    headers and body) for STATUS, `transport` for TRANSPORT, `refusal` for REFUSAL, the error
    object as the body and its `jsonrpc_code` for JSONRPC_ERROR, the text items as the body for
    TOOL_ERROR and REPORTED_SUCCESS. A StrEnum: its members hash as strings (a dict lookup on
    a plain Enum calls Python code).
    """

    STATUS = "status"
    """The upstream answered with an HTTP status a rule may read (an error, or one named)."""
    TRANSPORT = "transport"
    """No answer: the exchange with the upstream failed (`TransportKind`)."""
    REFUSAL = "refusal"
    """The gateway answers the request itself (no route, a limit): no upstream was asked."""
    JSONRPC_ERROR = "jsonrpc_error"
    """An MCP server answered with a JSON-RPC error carrying an integer code."""
    TOOL_ERROR = "tool_error"
    """An MCP tool call's result with `isError: true` (or an error with no integer code)."""
    REPORTED_SUCCESS = "reported_success"
    """An MCP result the server reported as a success (`isError: false`), read only by the
    rules that opt in (`match.mcp.is_error: false`)."""


@dataclass(slots=True)
class Observation:
    """A failed exchange as the rules see it; `body` is None when it was not read (too big)."""

    route: str
    method: str
    path: str
    kind: ObservationKind
    status: int | None = None
    transport: TransportKind | None = None
    refusal: Refusal | None = None
    """The gateway answers the request itself (no route, a limit): no upstream was asked."""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    content_type: str = ""
    idempotent: bool = True
    idempotency_key: bool = False
    """The caller sent an `Idempotency-Key`: it declared that repeating the request is safe."""
    query: str = ""
    """The request's query string as sent: with the path, what an HTTP failure's text may
    repeat (`match.request_echoed`); the answer cache keys on it."""
    tool: str | None = None
    jsonrpc_code: int | None = None
    missing_arguments: tuple[str, ...] = ()
    """A failed MCP tool call's arguments that its tool's inputSchema (in the server's
    tools/list) requires and the call left out (`match.mcp.missing_required`)."""
    arguments: tuple[str, ...] = ()
    """The tool's arguments as its inputSchema's `properties` lists them (then any other the
    call gave): what its failure's text may name (`match.mcp.argument`)."""
    argument_values: tuple[tuple[str, str], ...] = ()
    """The call's short string and integer arguments, (name, value): what its failure's
    text may echo (`match.mcp.argument`)."""
    credential_arguments: tuple[str, ...] = ()
    """The tool's arguments that carry a credential the caller gives
    (`match.mcp.credential_argument`)."""
    _text: Any = field(default=_UNSET, repr=False)
    _json: Any = field(default=_UNSET, repr=False)
    _inner: Any = field(default=_UNSET, repr=False)
    regex_gave_up: bool = False
    """A rule's regex timed out on this exchange and counted as no match
    (`gateway.classify.rules`): the answer cache never keeps such a verdict."""
    instant: float | None = field(default=None, repr=False)
    """The Unix time the verdict was made at, once `now()` has read it."""

    def now(self) -> float:
        """The Unix time, read once: a retry hint given as an instant (an HTTP-date) needs it.

        Reading it makes the verdict depend on when it was made (`clock_read`): the answer
        cache never keeps such a verdict (gateway/http/answer_cache.py).
        """
        if self.instant is None:
            self.instant = time.time()
        return self.instant

    @property
    def clock_read(self) -> bool:
        """The verdict used the current time (a retry delay counted down to an instant)."""
        return self.instant is not None

    @property
    def replay_safe(self) -> bool:
        """The identical request may be sent again: an idempotent method, or a key."""
        return self.idempotent or self.idempotency_key

    @property
    def text(self) -> str | None:
        """The body as text in the charset it declares (a BOM, else Content-Type's, else
        UTF-8; gateway.text.body_text), invalid UTF-8 replaced; None when unavailable."""
        if self._text is _UNSET:
            self._text = None if self.body is None else declared_text(self.body, self.content_type)
        result: str | None = self._text
        return result

    def known_text(self, text: str) -> None:
        """Hand over the body's text where the caller holds it already (an MCP tool error's
        items): `text` must be what reading `body` would give (`text` above)."""
        self._text = text

    def known_json(self, value: Any) -> None:
        """The JSON the rules see where the body's text is not JSON but the sender gave it
        as data too (an MCP tool error's `structuredContent` beside a plain-text item)."""
        if self.json is None:
            self._json = value

    @property
    def inner_text(self) -> str | None:
        """An MCP failure's own message with its SDK's wrapping removed
        (`gateway.classify.sdk_wrappers`): a tool error's text, a JSON-RPC error's `message`.
        None for HTTP, and when there is nothing to see through (the message is the text)."""
        if self._inner is _UNSET:
            self._inner = self._inner_message()
        inner: str | None = self._inner
        return inner

    def _inner_message(self) -> str | None:
        if self.jsonrpc_code is not None:
            error = self.json
            message = error.get("message") if isinstance(error, dict) else None
            return inner_message(message) if isinstance(message, str) else None
        if self.tool is None or self.text is None:
            return None
        inner = inner_message(self.text)
        return None if inner is self.text else inner

    @property
    def json(self) -> Any:
        """The body parsed as JSON, or None when it is not JSON."""
        if self._json is _UNSET:
            self._json = _parse_json(self.text)
        return self._json


def _parse_json(text: str | None) -> Any:
    if text is None:
        return None
    stripped = text.lstrip()
    if not stripped or stripped[0] not in '{["':
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None
