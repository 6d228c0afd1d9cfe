"""The gateway's own answers: a request it refuses itself, or an exchange that produced no
response, rendered like any other failure (the rows "own refusal" and "transport fault" of
gateway/exchange/answer.py's table).

No route (404), a path with an encoded control character (400), a path that leaves its route or
reads as another (400), a request body over `limits.max_request_body_bytes` (413) or too slow
(408) or, where the gateway reads it (MCP routes), in a coding it cannot undo (415), a request
head over the size limits (431, 414) or malformed (400), the connection cap (503), no upstream
connection in time under the gateway's own limits on them (503): no upstream is asked, but the
caller gets the same shapes as for any failure, through the one enrichment step
(`gateway.enrich.step`, with the built-in rules of `gateway.classify.own_failures`). In
`original` mode, and whenever enrichment fails open, the answer is the short plain text it
always was; `headers` adds the advisory headers to it; `additive` and `envelope` send the
envelope, since there is no upstream body to add to.

Which mode (docs/transparency.md#the-gateways-own-answers): on a route, the route's (and the
caller's `X-Error-Format`, as the route allows); with no route, the config's `default_mode`,
with `X-Error-Format` honoured when the request head was parsed. A head the parser refused
and a connection over the cap have no request to read a header from: `default_mode` alone.
"""

from __future__ import annotations

import logging
import re
import time
from http import HTTPStatus

from aiohttp import web
from multidict import CIMultiDict

from gateway.classify import Observation, ObservationKind
from gateway.enrich.step import FailureContext
from gateway.exchange.answer import Rendering, refused, synthesised
from gateway.exchange.context import RequestContext, fresh_request_id
from gateway.exchange.routes import asked_mode
from gateway.exchange.state import ExchangeState
from gateway.failure import Mode, Refusal, TransportKind
from gateway.header_names import ERROR_FORMAT, REQUEST_ID
from gateway.resolve.callers import ANONYMOUS
from gateway.resolve.service import Situation
from gateway.telemetry.logs import AccessRecord
from gateway.text.content_codings import ACCEPT_ENCODING

log = logging.getLogger("mendpoint.proxy")

NO_ROUTE = "-"
"""The route label of an answer no route gave (the access log's, the metrics')."""

PLAIN = {
    Refusal.NO_ROUTE: "No route for this path\n",
    Refusal.UNSAFE_PATH: "Request path leaves its route or is ambiguous\n",
    Refusal.BODY_TOO_LARGE: "Request body too large\n",
    Refusal.BODY_TIMEOUT: "Request body not received in time\n",
    Refusal.UNDECODABLE_BODY: "Request body in a Content-Encoding the gateway cannot read\n",
    Refusal.CONTROL_IN_PATH: "Request path with a control character\n",
    Refusal.OVERLOADED: "Gateway connection limit reached\n",
    Refusal.ROUTE_CONNECTIONS: "Gateway upstream connection limit reached for this route\n",
    Refusal.UPSTREAM_CONNECTIONS: "Gateway upstream connection limit reached\n",
}
"""The plain-text answers of `original` mode (a refused request head keeps aiohttp's text)."""


async def refuse(ctx: RequestContext, refusal: Refusal) -> web.Response:
    """A request on a route that the gateway answers itself, in the route's mode."""
    obs = ctx.observation(ObservationKind.REFUSAL, refusal=refusal)
    rendering = await ctx.state.answers.response(obs, ctx.failure_context(), ctx.route_answers)
    return _refused(refusal, ctx.request_id, rendering, PLAIN[refusal])


async def answer_transport_failure(ctx: RequestContext, kind: TransportKind) -> web.Response:
    """A synthesised 502 (or 504 on timeout) for an exchange that produced no response."""
    log.info(
        "upstream transport failure %s route=%s request_id=%s",
        kind.value,
        ctx.route.spec.name,
        ctx.request_id,
    )
    obs = ctx.observation(ObservationKind.TRANSPORT, transport=kind)
    rendering = await ctx.state.answers.response(obs, ctx.failure_context(), ctx.route_answers)
    headers: CIMultiDict[str] = CIMultiDict({REQUEST_ID: ctx.request_id})
    status, body = synthesised(kind, headers, rendering)
    return web.Response(status=status, body=body, headers=headers)


async def refuse_unrouted(
    request: web.Request,
    state: ExchangeState,
    record: AccessRecord,
    refusal: Refusal = Refusal.NO_ROUTE,
) -> web.Response:
    """A request refused before any route applies (a path no route serves, a path that is
    no path, an unsafe path whose spelling names no route): `default_mode`, or the mode the
    request asks for."""
    mode = asked_mode(state.config.default_mode, request.headers.get(ERROR_FORMAT))
    ctx = unrouted_context(mode, record.request_id, record.started, record)
    obs = Observation(
        route=NO_ROUTE,
        method=request.method,
        path=request.path,
        kind=ObservationKind.REFUSAL,
        refusal=refusal,
    )
    rendering = await state.answers.response(obs, ctx)
    return _refused(refusal, record.request_id, rendering, PLAIN[refusal])


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Unicode's control characters (category Cc): C0, DEL and C1."""


def path_refusal(raw_path: str, path: str) -> Refusal | None:
    """`CONTROL_IN_PATH` when the decoded `path` holds a control character. The parser
    refuses them raw, so any found here was percent-encoded (`/ok%0d%0a`). A path without
    a `%` costs one substring test."""
    if "%" in raw_path and _CONTROL.search(path) is not None:
        return Refusal.CONTROL_IN_PATH
    return None


def refused_head(state: ExchangeState, refusal: Refusal, text: str) -> web.Response | None:
    """The answer to a refusal with no request to read (a head the parser refused, the
    connection cap), in `default_mode`, closing the connection; None: the plain answer.
    `text` is that plain answer's, which `headers` mode keeps."""
    request_id = fresh_request_id()
    ctx = unrouted_context(state.config.default_mode, request_id, time.monotonic())
    obs = Observation(
        route=NO_ROUTE, method="", path="", kind=ObservationKind.REFUSAL, refusal=refusal
    )
    rendering = state.answers.refused_now(obs, ctx)
    if rendering is None:
        return None
    answer = _refused(refusal, request_id, rendering, text)
    answer.headers["Connection"] = "close"  # said, not only done: aiohttp answers in HTTP/1.0
    answer.force_close()
    return answer


def unrouted_context(
    mode: Mode, request_id: str, started: float, record: AccessRecord | None = None
) -> FailureContext:
    """No route, no caller identified (nothing is resolved for these failures)."""
    return FailureContext(
        route=NO_ROUTE,
        mode=mode,
        request_id=request_id,
        caller=ANONYMOUS,
        situation=Situation(operation="", route=None),
        started=started,
        notes=record,
    )


def _refused(
    refusal: Refusal, request_id: str, rendering: Rendering | None, text: str
) -> web.Response:
    headers: CIMultiDict[str] = CIMultiDict({REQUEST_ID: request_id})
    if refusal is Refusal.UNDECODABLE_BODY:  # RFC 9110 §12.5.3: the codings it does read
        headers["Accept-Encoding"] = ACCEPT_ENCODING
    status, body = refused(refusal, headers, rendering, text)
    return web.Response(status=status, body=body, headers=headers)


def refused_connection(state: ExchangeState) -> bytes | None:
    """The whole HTTP/1.1 answer to a connection over `limits.max_client_connections`, written
    before anything is read; None: the plain answer. Small, framed by Content-Length, and
    the connection closes after it."""
    answer = refused_head(state, Refusal.OVERLOADED, PLAIN[Refusal.OVERLOADED])
    if answer is None:
        return None
    status = HTTPStatus(answer.status)
    body = answer.body if isinstance(answer.body, bytes) else b""
    lines = [f"HTTP/1.1 {status.value} {status.phrase}"]
    lines += [f"{name}: {value}" for name, value in answer.headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body
