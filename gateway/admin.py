"""The admin listener: /metrics, /healthz, /readyz, /gaps and /followups, on its own port.

Kept off the data-path port so probes and scrapes never compete with, or get routed like,
client traffic, and so it can stay loopback-only while the gateway port is public.

One gateway process serves it from its own state. Under `serve --workers N` the supervisor
serves it instead (gateway.workers), from sources that span every worker: the same app, given
the metrics body, the gaps, the follow-up tables and the worker list as functions.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from gateway.followups import FollowupBook
from gateway.observe import METRICS_CONTENT_TYPE, exposition
from gateway.signatures import Signature, SignatureBook

ReadyCheck = Callable[[], bool]
Ranked = Sequence[tuple[Signature, int]]
GapsSource = Callable[[int], Awaitable[Ranked]]
Details = Callable[[], dict[str, object]]
FollowupTable = tuple[float, list[dict[str, object]]]
"""The window in seconds and the ranked rows (gateway.followups.rank)."""
FollowupsSource = Callable[[], Awaitable[FollowupTable]]
READY_CHECK: web.AppKey[ReadyCheck] = web.AppKey("mendpoint_ready_check")
GAPS: web.AppKey[GapsSource] = web.AppKey("mendpoint_gaps")
METRICS: web.AppKey[Callable[[], bytes]] = web.AppKey("mendpoint_metrics")
DETAILS: web.AppKey[Details | None] = web.AppKey("mendpoint_details")
FOLLOWUPS: web.AppKey[FollowupsSource | None] = web.AppKey("mendpoint_followup_tables")
MAX_GAPS = 200


def build_admin_app(
    is_ready: ReadyCheck,
    signatures: SignatureBook | GapsSource,
    *,
    metrics: Callable[[], bytes] = exposition,
    details: Details | None = None,
    followups: FollowupBook | FollowupsSource | None = None,
) -> web.Application:
    """`signatures` is this process's book, or a function ranking gaps from elsewhere;
    `details` adds fields (the supervisor's worker list) to the /readyz answer."""
    app = web.Application()
    app[READY_CHECK] = is_ready
    app[GAPS] = _local(signatures) if isinstance(signatures, SignatureBook) else signatures
    app[METRICS] = metrics
    app[DETAILS] = details
    app[FOLLOWUPS] = (
        _local_followups(followups) if isinstance(followups, FollowupBook) else followups
    )
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/gaps", _gaps)
    app.router.add_get("/followups", _followups)
    return app


def _local_followups(book: FollowupBook) -> FollowupsSource:
    async def table() -> FollowupTable:
        return book.settings.window_s, book.table()

    return table


def _local(book: SignatureBook) -> GapsSource:
    async def top(limit: int) -> Ranked:
        return book.top(limit)

    return top


async def _metrics(request: web.Request) -> web.Response:
    response = web.Response(body=request.app[METRICS]())
    response.headers["Content-Type"] = METRICS_CONTENT_TYPE
    return response


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    ready = request.app[READY_CHECK]()
    details = request.app[DETAILS]
    payload: dict[str, object] = {"status": "ready" if ready else "not ready"}
    if details is not None:
        payload.update(details())
    return web.json_response(payload, status=200 if ready else 503)


async def _gaps(request: web.Request) -> web.Response:
    """The top unmatched-error signatures, most frequent first (`?limit=N`, default 20)."""
    try:
        limit = max(1, min(MAX_GAPS, int(request.query.get("limit", "20"))))
    except ValueError:
        return web.json_response({"error": "limit must be an integer"}, status=400)
    top = await request.app[GAPS](limit)
    payload = [
        {"route": s.route, "status": s.status, "signature": s.text, "count": count}
        for s, count in top
    ]
    return web.Response(
        body=json.dumps({"signatures": payload}, ensure_ascii=False).encode(),
        content_type="application/json",
    )


async def _followups(request: web.Request) -> web.Response:
    """What callers did after each code's failures (docs/operations.md, "Follow-ups")."""
    source = request.app[FOLLOWUPS]
    if source is None:
        return web.json_response({"error": "follow-up tracking is not available here"}, status=404)
    window_s, rows = await source()
    return web.Response(
        body=json.dumps({"window_s": window_s, "codes": rows}, ensure_ascii=False).encode(),
        content_type="application/json",
    )
