"""The immutable per-config state the data path reads once per request.

A reload builds a new `GatewayState` and swaps the app's reference; a request keeps the state
it started with, so it never sees half of one config and half of another.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from gateway.classify import Classifier
from gateway.classify.redact import Redactor
from gateway.config.loaded import LoadedConfig
from gateway.config.models import GatewayConfig
from gateway.config.trust import TrustedProxies
from gateway.enrich.step import Enricher
from gateway.exchange.answers import HttpAnswers
from gateway.exchange.routes import RouteTable
from gateway.exchange.upstream.pool import UpstreamClient
from gateway.feedback.capture import Captures
from gateway.feedback.signatures import SignatureBook
from gateway.resolve.callers import CallerDirectory
from gateway.resolve.service import RecoveryService


@dataclass(frozen=True, slots=True)
class GatewayState:
    loaded: LoadedConfig
    enricher: Enricher
    """The one enrichment step (classify → resolve → render) HTTP and MCP routes share."""
    answers: HttpAnswers
    """How HTTP routes answer a failure with that step (their rendering, the answer cache)."""
    routes: RouteTable
    callers: CallerDirectory
    proxies: TrustedProxies
    redactor: Redactor

    @classmethod
    def build(cls, loaded: LoadedConfig) -> GatewayState:
        """Compile everything a request needs; raises nothing a validated config can cause."""
        enricher = Enricher.build(loaded)
        return cls(
            loaded,
            enricher,
            HttpAnswers.build(loaded, enricher),
            RouteTable(loaded.config.routes),
            CallerDirectory.build(loaded.callers),
            TrustedProxies.build(loaded.config.trusted_proxies),
            enricher.redactor,  # compiled once per config, for captures and envelopes alike
        )

    @property
    def config(self) -> GatewayConfig:
        """The config file as loaded (`loaded` also holds its rules, catalog and files)."""
        return self.loaded.config

    @property
    def classifier(self) -> Classifier:
        return self.enricher.classifier

    @property
    def recovery(self) -> RecoveryService:
        return self.enricher.recovery


class StateHolder:
    """The app's one mutable reference: a reload replaces `current` in a single assignment."""

    def __init__(self, state: GatewayState) -> None:
        self.current = state


STATE = web.AppKey("mendpoint_state", StateHolder)
SIGNATURES = web.AppKey("mendpoint_signatures", SignatureBook)
UPSTREAM = web.AppKey("mendpoint_upstream", UpstreamClient)
CAPTURES = web.AppKey("mendpoint_captures", Captures)
