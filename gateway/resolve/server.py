"""`mendpoint resolver`: the remote-resolver endpoint served from a local catalog.

A fleet of sidecars can point `resolver.url` here and share one central catalog. Requests are
validated with the same pydantic models the client uses; a bad request gets a 400 that says
what is wrong, never a traceback. With a token file (gateway.resolve.auth) a resolve request
without the gateway's bearer token gets 401 before its body is read. `/healthz` (for probes)
and `/metrics` answer without a token: they reveal the catalog version and counts, no skills.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from gateway.failure import Category
from gateway.resolve.auth import TokenFile, refused
from gateway.resolve.local import ResolveQuery, resolve_locally
from gateway.resolve.service import RecoveryService
from gateway.resolve.wire import ResolveRequest
from gateway.telemetry.metrics import METRICS_CONTENT_TYPE, exposition

RESOLVE_PATH = "/v1/resolve"
MAX_REQUEST_BYTES = 64 * 1024
SERVICE = web.AppKey("mendpoint_recovery", RecoveryService)
TOKENS = web.AppKey("mendpoint_resolver_tokens", TokenFile)


def build_resolver_app(
    service: RecoveryService, tokens: TokenFile | None = None
) -> web.Application:
    """The resolver endpoint; `tokens` None serves it unauthenticated (loopback, or insecure)."""
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app[SERVICE] = service
    if tokens is not None:
        app[TOKENS] = tokens
    app.router.add_post(RESOLVE_PATH, _resolve)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/metrics", _metrics)
    return app


async def _resolve(request: web.Request) -> web.Response:
    tokens = request.app.get(TOKENS)
    if tokens is not None:
        reason = tokens.check(request.headers.get("Authorization"))
        if reason is not None:
            refused(reason)
            response = _error(401, "a bearer token is required (docs/security.md)")
            response.headers["WWW-Authenticate"] = 'Bearer realm="mendpoint-resolver"'
            return response
    service = request.app[SERVICE]
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"request body larger than {MAX_REQUEST_BYTES} bytes")
    try:
        body = ResolveRequest.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:10]
        )
        return _error(400, f"invalid resolve request: {problems}")
    query = ResolveQuery(
        category=Category(body.failure.category),
        code=body.failure.code,
        intent=body.failure.intent,
        scopes=frozenset(body.caller.scopes),
        operation=body.context.operation,
    )
    catalog = service.catalog
    if catalog.lacks(query.intent):
        service.gaps.report(query.intent)
    resolution = resolve_locally(catalog, query, service.max_options)
    payload = {
        "options": [option.to_json() for option in resolution.options],
        "catalog_version": catalog.version,
    }
    return web.Response(body=dump(payload), content_type="application/json")


async def _healthz(request: web.Request) -> web.Response:
    version = request.app[SERVICE].catalog.version
    return web.Response(
        body=dump({"status": "ok", "catalog_version": version}), content_type="application/json"
    )


async def _metrics(request: web.Request) -> web.Response:
    response = web.Response(body=exposition())
    response.headers["Content-Type"] = METRICS_CONTENT_TYPE
    return response


def dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _error(status: int, message: str) -> web.Response:
    return web.Response(
        status=status, body=dump({"error": message}), content_type="application/json"
    )
