"""One generation of the per-config state: a config compiled for both transports at once.

A reload builds a new `Generation` and swaps the app's one reference to it
(`StateHolder.current`); a request keeps the generation it started with. It holds what both
transports share (`ExchangeState`: routes, callers, trust, the enrichment step) and each
transport's own compiled parts: an HTTP route's answers with their cache, an MCP route's
tool-failure upgrader. Built here, where the app is built, so neither transport builds the
other's and none keeps a cache of its own keyed on the config.

Here too the failure observers are declared, in the order they run (gateway/observers.py):
the request's access record and span, the metrics, the routes' captures, the unmatched
signatures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.classify.redact import Redactor
from gateway.config.loaded import LoadedConfig
from gateway.exchange.state import ExchangeState
from gateway.feedback.capture import CaptureObserver, Captures
from gateway.feedback.signatures import SignatureBook, SignatureObserver
from gateway.http.cached_answers import CachedAnswers
from gateway.mcp.reported_failures import REPORTED_SUCCESS
from gateway.mcp.tool_hints import ToolBook
from gateway.mcp.upgrade import Upgrader
from gateway.observers import FailureObserver
from gateway.telemetry.logs import AccessNotes
from gateway.telemetry.metrics import FailureMetrics


@dataclass(frozen=True, slots=True)
class Generation:
    exchange: ExchangeState
    http: CachedAnswers
    """How HTTP routes answer an upstream's failure (the shared answers, and the cache)."""
    mcp: Upgrader
    """How MCP routes upgrade a tool error or a JSON-RPC error."""

    @classmethod
    def build(
        cls, loaded: LoadedConfig, tools: ToolBook, captures: Captures, signatures: SignatureBook
    ) -> Generation:
        redactor = Redactor.build(loaded.config.redaction)  # for captures and envelopes alike
        declared = observers(loaded, captures, signatures, redactor)
        exchange = ExchangeState.build(loaded, declared, redactor)
        return cls(
            exchange,
            CachedAnswers.build(loaded, exchange.answers),
            Upgrader(exchange.enricher, loaded.config.mcp, tools, noticer(signatures)),
        )


def noticer(signatures: SignatureBook) -> Callable[[str, str], None]:
    """Where an MCP route's results reported as successes that read as failures are counted:
    the gaps, under their own status (gateway/mcp/reported_failures.py)."""

    def noticed(route: str, message: str) -> None:
        signatures.record(route, REPORTED_SUCCESS, message)

    return noticed


def observers(
    loaded: LoadedConfig, captures: Captures, signatures: SignatureBook, redactor: Redactor
) -> tuple[FailureObserver, ...]:
    """The failure path's side effects, in the order they run."""
    routes = loaded.config.routes
    capturing = {spec.name: spec.capture for spec in routes if spec.capture is not None}
    declared: list[FailureObserver] = [AccessNotes(), FailureMetrics()]
    if capturing:
        declared.append(CaptureObserver(capturing, captures, redactor))
    declared.append(SignatureObserver(signatures, redactor))
    return tuple(declared)


class StateHolder:
    """The app's one mutable reference: a reload replaces `current` in a single assignment."""

    def __init__(self, generation: Generation) -> None:
        self.current = generation

    def exchange(self) -> ExchangeState:
        return self.current.exchange


STATE = web.AppKey("mendpoint_state", StateHolder)
SIGNATURES = web.AppKey("mendpoint_signatures", SignatureBook)
CAPTURES = web.AppKey("mendpoint_captures", Captures)
