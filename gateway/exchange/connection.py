"""The client-facing HTTP/1.1 connection: what aiohttp's server does not get right by itself.

Two gaps, both in how a connection ends rather than in how a request is forwarded:

- A request head that breaks a size limit is answered 400 by aiohttp. RFC 6585 names the
  status a client can act on: 431 for a header field that is too long or too many fields,
  414 for an over-long request target. `GatewayProtocol` maps the parser's error to them.
- A request with `Connection: upgrade` and an `Upgrade` aiohttp does not serve (`h2c`, …)
  pauses aiohttp's C parser, which then discards whatever the client pipelined behind it in
  the same read: the next request would never be answered and its client would hang. The
  gateway switches protocols only for a WebSocket tunnel (`gateway.http.tunnel`, when the upstream
  answers 101); any other request with Upgrade it answers over HTTP/1.1 and closes the
  connection after it (`close_after_upgrade_request`); per RFC 9112 §9.3.2 a client then
  resends what it had pipelined.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from http import HTTPStatus
from typing import Any

from aiohttp import HttpVersion11, hdrs, web
from aiohttp.web import RequestHandler
from yarl import URL

from gateway.exchange.own_answers import refused_head
from gateway.exchange.state import ExchangeState
from gateway.failure import Refusal
from gateway.fence.aiohttp_private import (
    BadHttpMessage,
    HeadCheck,
    HttpProcessingError,
    LineTooLong,
    RawRequestMessage,
    check_request_heads,
)
from gateway.telemetry.logs import Throttled

TOO_MANY_HEADERS = "Too many headers received"
# How a request target begins (origin, absolute, asterisk form); a header line never does.
TARGET_STARTS = (b"/", b"*", b"http://", b"https://")


MALFORMED = Throttled(logging.getLogger("mendpoint"))
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ExpectHandler = Callable[[web.Request], Awaitable[None]]


class GatewayProtocol(RequestHandler):
    """aiohttp's request handler with precise statuses for request heads over the limits,
    answered in the gateway's `default_mode` like its other own answers
    (`gateway.exchange.own_answers`).

    `on_lost` is told once when the connection ends: the connection cap counts a connection
    from its accept to its end (`gateway.serve.connection_cap.ConnectionCap`). `check`
    replaces `head_refusal` as the test of every request head (it should call it too)."""

    __slots__ = ("_on_lost", "_state")

    def __init__(
        self,
        manager: Any,
        *,
        state: Callable[[], ExchangeState],
        on_lost: Callable[[], None] | None = None,
        check: HeadCheck | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._state = state
        self._on_lost = on_lost
        check_request_heads(self, head_refusal if check is None else check)

    def connection_lost(self, exc: BaseException | None) -> None:
        on_lost, self._on_lost = self._on_lost, None
        if on_lost is not None:
            on_lost()
        super().connection_lost(exc)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """A request the parser refused is the client's mistake, not the gateway's: one
        throttled warning line instead of aiohttp's ERROR with a traceback per request."""
        exc = kw.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            detail = str(exc.message)[:200].encode("unicode_escape").decode("ascii")
            MALFORMED.warning(
                "malformed-request",
                "malformed request refused with %d: %s",
                head_error_status(exc),
                detail,
            )
            return
        super().log_exception(*args, **kw)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status == HTTPStatus.BAD_REQUEST:
            status = head_error_status(exc)
        plain = super().handle_error(request, status, exc, message)  # logs; closes after it
        refusal = HEAD_REFUSALS.get(status) if isinstance(exc, HttpProcessingError) else None
        if refusal is None:
            return plain
        text = plain.text if isinstance(plain, web.Response) else None
        answer = refused_head(self._state(), refusal, text or "")
        # None: `original` mode, or enrichment failed open: aiohttp's plain text, as always.
        return plain if answer is None else answer


HEAD_REFUSALS = {
    HTTPStatus.BAD_REQUEST: Refusal.MALFORMED,
    HTTPStatus.REQUEST_URI_TOO_LONG: Refusal.TARGET_TOO_LONG,
    431: Refusal.HEADERS_TOO_LARGE,
    HTTPStatus.HTTP_VERSION_NOT_SUPPORTED: Refusal.VERSION_NOT_SUPPORTED,
}


class VersionNotSupported(HttpProcessingError):
    """A request in a major version of HTTP other than 1 (RFC 9110 §15.6.6)."""

    code = HTTPStatus.HTTP_VERSION_NOT_SUPPORTED
    message = "HTTP Version Not Supported"


def head_refusal(message: RawRequestMessage) -> tuple[int, HttpProcessingError] | None:
    """What llhttp parses but the gateway must not serve, refused before it is handled.

    - A major version other than 1: `HTTP/2.0` (llhttp knows it for the h2 preface), and
      `HTTP/0.9`, which a request line without a version is. aiohttp would answer in the
      client's version (`HTTP/0.9 200 OK` with headers, `HTTP/2.0 200 OK` on an HTTP/1
      connection). 505: the gateway speaks HTTP/1.0 and HTTP/1.1 (RFC 9110 §15.6.6).
    - `Transfer-Encoding` on HTTP/1.0, which RFC 9112 §6.1 makes faulty framing (an HTTP/1.0
      hop before it would not have de-chunked it), and any transfer coding besides
      `chunked`: the gateway undoes only chunked, and the upstream would take the
      still-coded bytes for the body (`gzip, chunked`). 400, as for every other framing
      the gateway does not trust (docs/security.md#guarantees-and-the-tests-that-hold-them).

    An HTTP/1.1 head without a chunked body costs a tuple comparison and a flag test.
    """
    version = message.version
    if version != HttpVersion11:
        if version.major != 1:
            return HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, VersionNotSupported()
        if message.chunked:
            return HTTPStatus.BAD_REQUEST, BadHttpMessage(TE_ON_HTTP10)
    if message.chunked:
        codings = ",".join(message.headers.getall(hdrs.TRANSFER_ENCODING, ())).split(",")
        if [coding.strip().lower() for coding in codings] != ["chunked"]:
            return HTTPStatus.BAD_REQUEST, BadHttpMessage(TE_NOT_CHUNKED)
    return None


TE_ON_HTTP10 = "Transfer-Encoding in an HTTP/1.0 request"
TE_NOT_CHUNKED = "Transfer-Encoding other than chunked alone"
# llhttp's refusal of a version it does not parse (HTTP/3.0, HTTP/1.2): its message quotes
# the request line, whose version says whether the major (505) or the syntax (400) is wrong.
_BAD_VERSION = re.compile(r"Invalid HTTP version.*HTTP/(\d)\.\d", re.DOTALL)


def head_error_status(exc: BaseException | None) -> int:
    """414 for a request target over `max_line_bytes`, 431 for header limits, 505 for a major
    version other than 1, else 400."""
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
    if isinstance(exc, BadHttpMessage):
        bad_version = _BAD_VERSION.search(str(exc.message))
        if bad_version is not None and bad_version.group(1) != "1":
            return HTTPStatus.HTTP_VERSION_NOT_SUPPORTED
    return HTTPStatus.BAD_REQUEST


class AnyPathResource(web.AbstractResource):
    """Every origin-form target, whatever its method: the gateway has one handler and routes
    on the raw target itself (`gateway.exchange.routes`).

    aiohttp's own catch-all, `/{tail:.*}`, is a regular expression over the *decoded* path,
    and `.` stops at a newline: `/ok%0a` matched nothing and aiohttp answered a plain 404
    itself, with no request id and no access line. This resource matches without looking at
    the path's characters, so every parsed request reaches the handler, which answers the
    ones it refuses in its own shapes (docs/transparency.md#paths).
    """

    def __init__(self, handler: Handler, expect_handler: ExpectHandler) -> None:
        super().__init__()
        self._route = web.ResourceRoute(hdrs.METH_ANY, handler, self, expect_handler=expect_handler)

    @property
    def canonical(self) -> str:
        return "/"  # indexed under "/", which aiohttp's router reaches for every path

    def url_for(self, **kwargs: str) -> URL:
        return URL.build(path="/", encoded=True)

    def add_prefix(self, prefix: str) -> None:
        raise RuntimeError("the gateway's catch-all cannot be prefixed")

    def get_info(self) -> Any:  # aiohttp types it with a private TypedDict
        return {"path": "/"}

    def raw_match(self, path: str) -> bool:
        return path == "/"

    async def resolve(
        self, request: web.Request
    ) -> tuple[web.UrlMappingMatchInfo | None, set[str]]:
        if not request.rel_url.raw_path.startswith("/"):
            return None, set()  # `*` with another method than OPTIONS: not a request at all
        return web.UrlMappingMatchInfo({}, self._route), {hdrs.METH_ANY}

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[web.ResourceRoute]:
        return iter((self._route,))


class AsteriskResource(web.AbstractResource):
    """`OPTIONS *` (RFC 9110 §9.3.7): a question about the server as a whole, in asterisk form.

    aiohttp's router knows only paths that start with "/", so it would answer 404 itself.
    This resource takes the asterisk target to the catch-all handler, which forwards it to
    the route for "/" as `OPTIONS *`. Any other method with "*" is not a request at all.
    """

    def __init__(self, handler: Handler, expect_handler: ExpectHandler) -> None:
        super().__init__()
        self._route = web.ResourceRoute(
            hdrs.METH_OPTIONS, handler, self, expect_handler=expect_handler
        )

    @property
    def canonical(self) -> str:
        return "*"

    def url_for(self, **kwargs: str) -> URL:
        return URL.build(path="*", encoded=True)

    def add_prefix(self, prefix: str) -> None:
        raise RuntimeError("the asterisk target cannot be prefixed")

    def get_info(self) -> Any:  # aiohttp types it with a private TypedDict
        return {"path": "*"}

    def raw_match(self, path: str) -> bool:
        return path == "*"

    async def resolve(
        self, request: web.Request
    ) -> tuple[web.UrlMappingMatchInfo | None, set[str]]:
        if request.rel_url.path_safe != "*":
            return None, set()
        if request.method != hdrs.METH_OPTIONS:
            return None, {hdrs.METH_OPTIONS}
        return web.UrlMappingMatchInfo({}, self._route), {hdrs.METH_OPTIONS}

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[web.ResourceRoute]:
        return iter((self._route,))


async def close_after_upgrade_request(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: end the connection after answering any request that asked to
    switch protocols, so nothing pipelined behind it waits forever for an answer."""
    if "Upgrade" in request.headers:
        response.force_close()
        if response.status == 101:  # a WebSocket tunnel (gateway.http.tunnel) says Upgrade
            return
        # aiohttp has already written its Connection header decision by now: say it here.
        response.headers["Connection"] = "close"
