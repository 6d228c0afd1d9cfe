"""Per-application MCP state: the session request tables, the bridge sessions and the
upgrader of the live config.

Lives for the app's lifetime (across config reloads), so a response on a resumed GET stream
still finds the request a POST registered before a reload, and a bridge session keeps its
child. The upgrader is rebuilt only when the config state object changes. Bridge children
never outlive the app: GET streams end when shutdown begins, every child is killed at cleanup.
"""

from __future__ import annotations

from aiohttp import web

from gateway.classify import Classifier
from gateway.config.loaded import LoadedConfig
from gateway.mcp import cors
from gateway.mcp.bridge_sessions import Bridges
from gateway.mcp.jsonrpc import SessionTables
from gateway.mcp.upgrade import Upgrader
from gateway.resolve.service import RecoveryService


class McpRuntime:
    def __init__(self, loaded: LoadedConfig) -> None:
        spec = loaded.config.mcp
        self.sessions = SessionTables(spec.max_sessions, spec.max_tracked_requests)
        self.bridges = Bridges()
        self._built_for: object | None = None
        self._upgrader: Upgrader | None = None

    def upgrader(
        self, key: object, loaded: LoadedConfig, classifier: Classifier, recovery: RecoveryService
    ) -> Upgrader:
        """The upgrader for the config state `key`, built once per state."""
        if self._upgrader is None or self._built_for is not key:
            self._upgrader = build_upgrader(loaded, classifier, recovery)
            self._built_for = key
        return self._upgrader


def build_upgrader(
    loaded: LoadedConfig, classifier: Classifier, recovery: RecoveryService
) -> Upgrader:
    config = loaded.config
    return Upgrader(
        classifier,
        recovery,
        config.mcp,
        prefix=config.headers.prefix,
        enrich_budget_s=config.enrich_budget_ms / 1000,
        resolver_budget_s=config.resolver.budget_ms / 1000,
    )


MCP_RUNTIME = web.AppKey("mendpoint_mcp", McpRuntime)


def install(app: web.Application, loaded: LoadedConfig) -> None:
    """Give `app` its MCP runtime; done at build time, before the app is frozen."""
    runtime = app[MCP_RUNTIME] = McpRuntime(loaded)

    async def end_streams(_: web.Application) -> None:
        runtime.bridges.close_listeners()

    async def kill_children(_: web.Application) -> None:
        await runtime.bridges.close_all()

    app.on_shutdown.append(end_streams)
    app.on_cleanup.append(kill_children)
    app.on_response_prepare.append(cors.add_headers)
