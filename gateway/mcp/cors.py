"""CORS for MCP routes: browser clients (a web inspector, an in-page agent) on allowed origins.

A browser sends an `OPTIONS` preflight before a cross-origin POST with `Content-Type:
application/json` or an `Mcp-Session-Id` header, and hides every response header it is not
told it may read. The gateway answers preflights itself for the origins the route lets in
(`allowed_origins`, the same list as the DNS-rebinding defence in `origin.py`; a refused origin
has already had its 403), and marks the request so that every answer to it, streamed or
not, made by the bridge, the relay or a failure path, carries `Access-Control-Allow-Origin`
and exposes the MCP headers (`Mcp-Session-Id`, `Mcp-Protocol-Version`, `Last-Event-ID`) and
`WWW-Authenticate`, which an OAuth client must read on a 401. An upstream that sends its own
`Access-Control-Allow-Origin` keeps it.
"""

from __future__ import annotations

from aiohttp import web
from multidict import CIMultiDict

from gateway.header_names import ERROR_FORMAT, MCP_SESSION_ID, REQUEST_ID

ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
ALLOW_HEADERS = (
    "Accept",
    "Authorization",
    "Content-Type",
    "Last-Event-ID",
    "Mcp-Method",
    "Mcp-Name",
    "Mcp-Protocol-Version",
    MCP_SESSION_ID,
    ERROR_FORMAT,
    REQUEST_ID,
)
EXPOSE_HEADERS = ", ".join(
    (
        MCP_SESSION_ID,
        "Mcp-Protocol-Version",
        "Last-Event-ID",
        "WWW-Authenticate",
        REQUEST_ID,
        "Retry-After",
    )
)
MAX_AGE_S = "600"

CORS_ORIGIN = web.RequestKey("mendpoint_cors_origin", str)


def is_preflight(request: web.Request) -> bool:
    return (
        request.method == "OPTIONS"
        and "Origin" in request.headers
        and "Access-Control-Request-Method" in request.headers
    )


def preflight(request: web.Request, origin: str, request_id: str) -> web.Response:
    """204 allowing the MCP methods and headers (plus any `Mcp-Param-*` the page asks for)."""
    asked = request.headers.get("Access-Control-Request-Headers", "")
    extra = [
        name.strip() for name in asked.split(",") if name.strip().lower().startswith("mcp-param-")
    ]
    headers = CIMultiDict(
        {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": ALLOW_METHODS,
            "Access-Control-Allow-Headers": ", ".join([*ALLOW_HEADERS, *extra]),
            "Access-Control-Max-Age": MAX_AGE_S,
            "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            REQUEST_ID: request_id,
        }
    )
    return web.Response(status=204, headers=headers)


def allow(request: web.Request, origin: str) -> None:
    """Every answer to this request will carry the CORS headers for `origin`."""
    request[CORS_ORIGIN] = origin


async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: the CORS headers of a marked request, as its head goes out."""
    origin = request.get(CORS_ORIGIN)
    if origin is None or "Access-Control-Allow-Origin" in response.headers:
        return
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
    response.headers.add("Vary", "Origin")
