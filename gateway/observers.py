"""What the failure path tells the observers declared for it, and the protocol they implement.

The enrichment step (gateway/enrich/step.py) classifies a failure once. Everything else that
happens because of it is an observer in its own band: counted in the metrics
(gateway/telemetry/metrics.py), written into the request's access record and span
(gateway/telemetry/logs.py), captured for `mendpoint suggest` (gateway/feedback/capture.py),
kept as a signature for `mendpoint gaps` (gateway/feedback/signatures.py). They are handed to
the step in a declared order where the app is built (gateway/serve/generation.py), as
mitmproxy declares its addons, and the step calls the protocol, never a feature by name.
The events carry only the vocabulary's types, so every band below the step can observe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.failure import Failure, Mode, Refusal, TransportKind


class FailureNotes(Protocol):
    """The request's own record of a failure (its access line and its span)."""

    def note_failure(self, failure: Failure, rule: str, mode: Mode) -> None: ...

    def note_fallback(self, reason: str) -> None: ...

    def note_mcp_failure(self, jsonrpc_code: int | None) -> None:
        """An MCP call failed (`error.type` on the span: the JSON-RPC code, or a tool error)."""


@dataclass(frozen=True, slots=True)
class Classified:
    """One failure as the step classified it (the failure already redacted), told once."""

    route: str
    mode: Mode
    request_id: str
    method: str
    path: str
    status: int | None
    transport: TransportKind | None
    refusal: Refusal | None
    headers: Mapping[str, str]
    body: bytes | None
    tool: str | None
    """An MCP call's tool (None for an HTTP failure, or another JSON-RPC method)."""
    operation: str
    """What the caller asked for: the tool, the JSON-RPC method, or `METHOD /path`."""
    failure: Failure
    rule: str
    is_default: bool
    """Only a shipped fallback matched: no rule of the operator's names this failure."""
    notes: FailureNotes | None

    @property
    def kind(self) -> str:
        """The failure's signature kind: its status, `transport:KIND`, or `mcp`."""
        if self.status is not None:
            return str(self.status)
        if self.transport is not None:
            return f"transport:{self.transport.value}"
        return "mcp"


class FailureObserver(Protocol):
    """A declared side effect of the failure path. Each call is synchronous and cheap: a
    failure waits for every observer, and an exception falls the answer open."""

    def classified(self, event: Classified) -> None:
        """A failure was classified (every mode, `original` included, and a replay from the
        answer cache)."""

    def upgraded(self, route: str, mode: Mode) -> None:
        """The caller got an upgraded answer (`headers`, `additive` or `envelope`)."""

    def fell_back(self, route: str, reason: str, notes: FailureNotes | None) -> None:
        """The original answer went out instead of an upgraded one, for `reason`."""
