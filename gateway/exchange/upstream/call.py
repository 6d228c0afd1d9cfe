"""Calling the upstream: the one helper every route type sends its request through, and the
one place the upstream client's exceptions become `TransportKind` values. Past this module a
transport fault is a value, not an exception.
"""

from __future__ import annotations

import logging
import time

from aiohttp import hdrs

from gateway.config.trust import unmapped_peer
from gateway.exchange.body import RequestBody
from gateway.exchange.context import RequestContext
from gateway.exchange.headers import upstream_request_headers
from gateway.exchange.shares import PoolFull
from gateway.exchange.state import UPSTREAM
from gateway.exchange.upstream.deadline import ResponseDeadline
from gateway.exchange.upstream.links import UPSTREAM_ERRORS, Interim, transport_kind
from gateway.exchange.upstream.round_trip import UpstreamResponse
from gateway.failure import Refusal, TransportKind
from gateway.telemetry.logs import Throttled
from gateway.telemetry.metrics import count_pool_refusal, observe_upstream

log = logging.getLogger("mendpoint.upstream")
POOL_WARNINGS = Throttled(log)


async def call_upstream(
    ctx: RequestContext,
    target: str,
    body: RequestBody | bytes | None,
    *,
    interim: Interim | None = None,
    upgrade: str | None = None,
) -> UpstreamResponse | TransportKind | Refusal:
    """Send the client's request to the route's upstream, exactly once; its response head,
    the transport fault that stopped it, or the refusal when the gateway's own connection
    limits left no connection for it (nothing was sent: `pool_refusal`).

    HTTP forwarding and MCP routes both call the upstream here, so both get the forwarded
    headers, `limits.response_timeout_s` (a `ResponseDeadline` that starts once the request
    body has been sent whole, kept on `ctx` for the error body) and the same fault mapping.
    `interim` is told of 100 Continue and 103 Early Hints (HTTP routes pass them on; MCP
    routes keep aiohttp's immediate 100). A 1xx as the final answer is an invalid response:
    Upgrade is hop-by-hop and a 101 would switch the client's connection to a protocol nobody
    negotiated; except that `upgrade` (the one protocol the gateway tunnels, "websocket")
    asks the upstream for it, and then its 101 is the answer (`gateway.http.tunnel`).
    """
    request, route, record = ctx.request, ctx.route, ctx.record
    client = request.app[UPSTREAM]
    deadline = ResponseDeadline(ctx.state.config.limits.response_timeout_s, client.loop)
    if isinstance(body, RequestBody):
        body.on_end = deadline.start
    else:
        deadline.start()
    ctx.deadline = deadline
    headers = upstream_request_headers(
        request.headers,
        peer=unmapped_peer(request.remote),
        scheme=request.scheme,
        upstream_host=route.upstream_host,
        preserve_host=route.spec.preserve_host,
        request_id=record.request_id,
        trusted=ctx.from_trusted_proxy,
    )
    if upgrade is not None:
        # Hop-by-hop everywhere else, but this hop is the one the client asked to upgrade.
        headers[hdrs.UPGRADE] = upgrade
        headers[hdrs.CONNECTION] = "Upgrade"
    sent = time.monotonic()
    try:
        upstream = await client.request(
            request.method,
            route.origin,
            route.upstream_target(target),
            headers,
            body,
            deadline,
            idempotent=request.method in route.idempotent,
            interim=interim,
            share=client.share(route.spec.name, route.spec.max_connections),
            attempts=record.trace,
        )
    except PoolFull as exc:
        return pool_refusal(record.route, exc)
    except UPSTREAM_ERRORS as exc:
        return transport_kind(exc)
    if upstream.status < 200 and not (upgrade is not None and upstream.status == 101):
        upstream.close()
        return TransportKind.INVALID_RESPONSE
    record.upstream_ms = (time.monotonic() - sent) * 1000
    record.upstream_status = upstream.status
    if record.trace is not None:
        record.trace.answered(upstream.status)
    observe_upstream(record.route, record.upstream_ms / 1000)
    return upstream


def pool_refusal(route: str, exc: PoolFull) -> Refusal:
    """The gateway's own limit, not the upstream, kept the request from being sent: say
    which one to the operator (once a minute per limit) and count it."""
    POOL_WARNINGS.warning(
        exc.key,
        "no upstream connection for route %s in time: the gateway's %s (%d) are all in use; "
        "answered 503 (docs/transparency.md#fair-shares-of-the-pool)",
        route,
        exc.key,
        exc.limit,
    )
    count_pool_refusal(route, exc.refusal)
    return exc.refusal
