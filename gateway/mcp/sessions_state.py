"""Per-application MCP state: the session request tables and the bridge sessions.

Lives for the app's lifetime (across config reloads), so a response on a resumed GET stream
still finds the request a POST registered before a reload, and a bridge session keeps its
child. (What depends on the config, the tool-failure upgrader, lives in the per-config
generation: gateway/serve/generation.py.) Bridge children never outlive the app: GET
streams end when shutdown begins, every child is killed at cleanup.
"""

from __future__ import annotations

from aiohttp import web

from gateway.config.loaded import LoadedConfig
from gateway.mcp import cors
from gateway.mcp.bridge_sessions import Bridges
from gateway.mcp.jsonrpc import SessionTables
from gateway.mcp.request_body import BodyReader
from gateway.mcp.tool_hints import ToolBook


class McpRuntime:
    def __init__(self, loaded: LoadedConfig) -> None:
        spec = loaded.config.mcp
        self.sessions = SessionTables(spec.max_sessions, spec.max_tracked_requests)
        self.bridges = Bridges(loaded.session_keys)
        self.tools = ToolBook()
        """What each route's server declared of its tools in tools/list (tool_hints); kept
        across reloads, as the servers behind the routes are."""
        self.bodies = BodyReader()
        """Reads request bodies, the large and coded ones off the loop, one at a time."""
        self.stop_by: float | None = None
        """When the gateway's drain must be over (a loop time), once it began."""


MCP_RUNTIME = web.AppKey("mendpoint_mcp", McpRuntime)


def install(app: web.Application, loaded: LoadedConfig) -> McpRuntime:
    """Give `app` its MCP runtime; done at build time, before the app is frozen."""
    runtime = app[MCP_RUNTIME] = McpRuntime(loaded)

    async def end_streams(_: web.Application) -> None:
        runtime.bridges.close_listeners()

    async def kill_children(_: web.Application) -> None:
        await runtime.bridges.close_all(runtime.stop_by)

    app.on_shutdown.append(end_streams)
    app.on_cleanup.append(kill_children)
    app.on_response_prepare.append(cors.add_headers)
    return runtime
