"""The client-facing HTTP/1.1 connection: what aiohttp's server does not get right by itself.

Two gaps, both in how a connection ends rather than in how a request is forwarded:

- A request head that breaks a size limit is answered 400 by aiohttp. RFC 6585 names the
  status a client can act on: 431 for a header field that is too long or too many fields,
  414 for an over-long request target. `GatewayProtocol` maps the parser's error to them.
- A request with `Connection: upgrade` and an `Upgrade` aiohttp does not serve (`h2c`, …)
  pauses aiohttp's C parser, which then discards whatever the client pipelined behind it in
  the same read: the next request would never be answered and its client would hang. The
  gateway never switches protocols (Upgrade is hop-by-hop, never 101), so it answers such a
  request over HTTP/1.1 and closes the connection after it (`close_after_upgrade_request`);
  per RFC 9112 §9.3.2 a client then resends what it had pipelined.
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler

TOO_MANY_HEADERS = "Too many headers received"
# How a request target begins (origin, absolute, asterisk form); a header line never does.
TARGET_STARTS = (b"/", b"*", b"http://", b"https://")


class GatewayProtocol(RequestHandler):
    """aiohttp's request handler with precise statuses for request heads over the limits."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status == HTTPStatus.BAD_REQUEST:
            status = head_error_status(exc)
        return super().handle_error(request, status, exc, message)


def head_error_status(exc: BaseException | None) -> int:
    """414 for a request target over `max_line_bytes`, 431 for header limits, else 400."""
    if isinstance(exc, LineTooLong):
        line = exc.args[0] if exc.args else b""
        if isinstance(line, str):
            line = line.encode("latin-1", "replace")
        # The parser hands over the offending bytes only: a request target starts like one;
        # a field name never does. (A field value that starts with "/" or "http://" gets
        # 414 rather than 431: still a 4xx that closes the connection.)
        is_target = line.lower().startswith(TARGET_STARTS)
        return HTTPStatus.REQUEST_URI_TOO_LONG if is_target else 431
    if isinstance(exc, BadHttpMessage) and exc.message == TOO_MANY_HEADERS:
        return 431
    return HTTPStatus.BAD_REQUEST


async def close_after_upgrade_request(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: end the connection after answering any request that asked to
    switch protocols, so nothing pipelined behind it waits forever for an answer."""
    if "Upgrade" in request.headers:
        response.force_close()
        # aiohttp has already written its Connection header decision by now: say it here.
        response.headers["Connection"] = "close"
