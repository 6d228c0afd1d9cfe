"""The `CallSite` of an HTTP request of an MCP route (the Streamable HTTP route, the bridge):
mode, caller and path come from the request's context, as for any HTTP route."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.enrich.step import FailureContext
from gateway.exchange.context import RequestContext
from gateway.failure import Mode
from gateway.resolve.service import Situation


@dataclass(frozen=True, slots=True)
class HttpCallSite:
    """The `CallSite` of one HTTP request: mode and caller come from the proxy's context."""

    ctx: RequestContext

    @property
    def route_name(self) -> str:
        return self.ctx.route.spec.name

    @property
    def path(self) -> str:
        return self.ctx.request.path

    @property
    def mode(self) -> Mode:
        return self.ctx.mode

    @property
    def idempotent(self) -> bool:
        return "POST" in self.ctx.route.idempotent

    def failure_context(self, situation: Situation) -> FailureContext:
        return self.ctx.failure_context(situation)
