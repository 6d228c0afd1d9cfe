"""One config compiled for what both transports share: routes, callers, trust, the step.

A reload builds a new generation of the per-config state (gateway/serve/generation.py: this,
plus each transport's own compiled parts) and swaps the app's reference; a request keeps the
state it started with, so it never sees half of one config and half of another.
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
from gateway.exchange.answer import Answers
from gateway.exchange.routes import RouteTable
from gateway.exchange.upstream.pool import UpstreamClient
from gateway.observers import FailureObserver
from gateway.resolve.callers import CallerDirectory
from gateway.resolve.service import RecoveryService


@dataclass(frozen=True, slots=True)
class ExchangeState:
    loaded: LoadedConfig
    answers: Answers
    """The one enrichment step (classify → resolve → render) HTTP and MCP routes share, as
    HTTP answers use it (gateway/exchange/answer.py)."""
    routes: RouteTable
    callers: CallerDirectory
    proxies: TrustedProxies
    redactor: Redactor

    @classmethod
    def build(
        cls,
        loaded: LoadedConfig,
        observers: tuple[FailureObserver, ...] = (),
        redactor: Redactor | None = None,
    ) -> ExchangeState:
        """Compile everything a request needs; raises nothing a validated config can cause."""
        enricher = Enricher.build(loaded, observers, redactor)
        return cls(
            loaded,
            Answers(enricher),
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
    def enricher(self) -> Enricher:
        return self.answers.step

    @property
    def classifier(self) -> Classifier:
        return self.enricher.classifier

    @property
    def recovery(self) -> RecoveryService:
        return self.enricher.recovery


UPSTREAM = web.AppKey("mendpoint_upstream", UpstreamClient)
