"""The admin listener: /metrics, /healthz, /readyz and /gaps, on its own (loopback) port.

Kept off the data-path port so probes and scrapes never compete with, or get routed like,
client traffic, and so it can stay loopback-only while the gateway port is public.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aiohttp import web

from gateway.observe import METRICS_CONTENT_TYPE, exposition
from gateway.signatures import SignatureBook

ReadyCheck = Callable[[], bool]
READY_CHECK: web.AppKey[ReadyCheck] = web.AppKey("mendpoint_ready_check")
GAPS = web.AppKey("mendpoint_gaps", SignatureBook)
MAX_GAPS = 200


def build_admin_app(is_ready: Callable[[], bool], signatures: SignatureBook) -> web.Application:
    app = web.Application()
    app[READY_CHECK] = is_ready
    app[GAPS] = signatures
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/gaps", _gaps)
    return app


async def _metrics(request: web.Request) -> web.Response:
    response = web.Response(body=exposition())
    response.headers["Content-Type"] = METRICS_CONTENT_TYPE
    return response


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    if request.app[READY_CHECK]():
        return web.json_response({"status": "ready"})
    return web.json_response({"status": "not ready"}, status=503)


async def _gaps(request: web.Request) -> web.Response:
    """The top unmatched-error signatures, most frequent first (`?limit=N`, default 20)."""
    try:
        limit = max(1, min(MAX_GAPS, int(request.query.get("limit", "20"))))
    except ValueError:
        return web.json_response({"error": "limit must be an integer"}, status=400)
    top = request.app[GAPS].top(limit)
    payload = [
        {"route": s.route, "status": s.status, "signature": s.text, "count": count}
        for s, count in top
    ]
    return web.Response(
        body=json.dumps({"signatures": payload}, ensure_ascii=False).encode(),
        content_type="application/json",
    )
