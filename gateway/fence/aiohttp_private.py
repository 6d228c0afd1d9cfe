"""Every use of aiohttp's private names, in one place, each with the reason it is needed.

aiohttp may rename or rework anything that starts with an underscore in any release. So the
gateway touches such names here and nowhere else, pins aiohttp to the minor series its suite
passed on (pyproject.toml), and tests/fence/test_aiohttp_private.py checks each name below
against the installed aiohttp: an upgrade that removes or changes one fails a test that names
it, instead of silently changing what the proxy does.

The names, by what needs them:

- `LazyReadTimeoutProtocol` (the upstream client's connection protocol) overrides
  `ResponseHandler._reschedule_timeout`, which aiohttp calls on every `data_received` and
  on a resume after a flow-control pause, and reads or writes `_read_timeout`,
  `_read_timeout_handle`, `_loop`, `_drop_timeout`, `_on_read_timeout` and
  `_reading_paused`. aiohttp re-creates a timer handle per received chunk and per pause;
  the override keeps one timer and moves a timestamp instead (hundreds of handles fewer per
  10 MB body).
- `RelayResponse` overrides `StreamResponse._prepare_headers`, the step in which aiohttp
  defaults a missing Content-Type to application/octet-stream: a transparent proxy must not
  claim a type the origin never sent. (`relay.RewrittenResponse`, a rewritten error body,
  inherits it without naming anything private.)
- `OneWriteResponse` sets `StreamResponse._send_headers_immediately`, aiohttp's own switch
  (`web.Response` sets it too) that keeps a prepared head in the writer until the body is
  written: head and body then go out in one `send()`, not two.
- `SiblingConnector` (a worker relaying a bridge session to the worker that holds it)
  overrides `UnixConnector._create_connection` and reads `_loop` and `_factory`: uvloop's
  `create_unix_connection` refuses a path in Linux's abstract namespace (EINVAL), where
  the workers' sockets are, but takes a socket already connected to one.
- `check_request_heads` wraps `RequestHandler._parser`, the connection's request parser,
  and answers a head it refuses with aiohttp's `web_protocol._ErrInfo`, the value aiohttp
  itself queues for a head its parser rejected. llhttp accepts some heads the gateway must
  not serve (`HTTP/2.0` or no version on an HTTP/1 connection, `Transfer-Encoding` on
  HTTP/1.0 or with a coding before `chunked`), and by the time aiohttp's request handler
  runs, the body has been de-chunked and the answer's status line would repeat the client's
  version. Refused in the parser's place, such a head takes the path of every other
  malformed request (`GatewayProtocol.handle_error`): the gateway's answer, then close.
- `NO_EXTENSIONS` (`aiohttp.helpers`, not exported): whether aiohttp runs on its pure-Python
  HTTP parser (`AIOHTTP_NO_EXTENSIONS`, or no C extension built). The gateway refuses to
  serve on it (gateway/serve/app.py): the C parser is the one hardened against smuggling.
- `server_handler_kwargs` reads `web.Server._kwargs`, the request-handler settings aiohttp's
  `Server.__call__` passes to each `RequestHandler`. The gateway builds its own handler
  (`GatewayProtocol`, precise 414/431 statuses) with the same settings.
Beside them, names that carry no underscore but are not aiohttp's public API either (absent
from `aiohttp.__all__` and `aiohttp.web.__all__`, undocumented): the upstream client and the
tunnels are built from aiohttp's own parts instead of `ClientSession`, and they are imported
from here, so the same test checks that each still exists with what the gateway calls on it:
`ResponseHandler` (the client protocol: `set_response_params`, `read`, `set_exception`),
`StreamWriter` (`write_headers`, `enable_chunking`, `send_headers`, `write`, `write_eof`,
`set_eof`), `TimeoutHandle` and `BaseTimerContext` (the total timeout), `BaseProtocol`
(flow control for tunnels), `RawRequestMessage`, `HttpProcessingError`, `BadHttpMessage`,
`LineTooLong` (what the parsers produce and raise), and the `Handler` and `Middleware` types.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any, cast

import aiohttp
from aiohttp import hdrs, web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.client_exceptions import UnixClientConnectorError
from aiohttp.client_proto import ResponseHandler
from aiohttp.helpers import NO_EXTENSIONS, BaseTimerContext, TimeoutHandle
from aiohttp.http import StreamWriter
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong
from aiohttp.http_parser import HttpParser, RawRequestMessage
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_protocol import RequestHandler, _ErrInfo


class LazyReadTimeoutProtocol(ResponseHandler):
    """aiohttp's `ResponseHandler` with a lazy `sock_read` timer.

    aiohttp cancels and re-creates a timer handle on every `data_received`: hundreds per
    10 MB body. Here data only moves a timestamp; the one timer, when it fires early, re-arms
    itself for what is left. Same deadline (no byte for `read_timeout_s`), far fewer handles.
    aiohttp's `_drop_timeout` (end of body, errors) still stops it.

    Flow control pauses reading whenever the client takes the body slower than the upstream
    sends it: about 50 times per 10 MB relayed. aiohttp stops the timer on each pause and
    starts a new one on resume, because the time spent paused is ours, not the upstream's.
    Here the timer stays armed through a pause: a check that finds reading paused waits one
    more `read_timeout_s`, and the resume moves the timestamp, so the deadline is the same
    (`read_timeout_s` of silence while reading) at about a third of the cost per pause and
    resume (a microbenchmark: 5 → 2 µs on uvloop, 30 → 18 µs on asyncio's loop).
    """

    _last_read = 0.0

    def pause_reading(self) -> None:
        handle, self._read_timeout_handle = self._read_timeout_handle, None
        try:  # aiohttp's pause, without its `_drop_timeout`
            super().pause_reading()
        finally:
            self._read_timeout_handle = handle

    def _reschedule_timeout(self) -> None:
        timeout = self._read_timeout
        if not timeout:
            self._drop_timeout()
            return
        self._last_read = self._loop.time()
        if self._read_timeout_handle is None:
            self._read_timeout_handle = self._loop.call_at(
                self._last_read + timeout, self._check_read_timeout
            )

    def _check_read_timeout(self) -> None:
        self._read_timeout_handle = None
        timeout = self._read_timeout
        if not timeout:
            return
        now = self._loop.time()
        # Paused by flow control: not the upstream's silence. The resume moves `_last_read`.
        due = now + timeout if self._reading_paused else self._last_read + timeout
        if due > now:
            self._read_timeout_handle = self._loop.call_at(due, self._check_read_timeout)
        else:
            self._on_read_timeout()


class RelayResponse(web.StreamResponse):
    """A StreamResponse that does not invent a Content-Type the upstream never sent.

    aiohttp defaults a missing Content-Type to application/octet-stream while preparing the
    headers; a transparent proxy must not, because the client would then see a type the
    origin never claimed. The hook is aiohttp's own `_prepare_headers` step.
    """

    async def _prepare_headers(self) -> None:
        had_type = hdrs.CONTENT_TYPE in self.headers
        await super()._prepare_headers()
        if not had_type:
            self.headers.popall(hdrs.CONTENT_TYPE, None)


class OneWriteResponse(RelayResponse):
    """A RelayResponse whose head waits for its body, so both go out in one write.

    aiohttp's StreamResponse sends its head the moment it is prepared, a `send()` of its own,
    as a stream should: the client sees the head while the body is still coming. An answer
    whose body is already whole gains nothing from that and pays a second system call per
    response; `web.Response` opts out with this class attribute, and so does this.
    """

    _send_headers_immediately = False


class SiblingConnector(aiohttp.UnixConnector):
    """A `UnixConnector` that connects its socket itself, so an abstract-namespace path
    (`"\\0name"`) works on uvloop as on asyncio: uvloop's `create_unix_connection` refuses
    such a path with EINVAL but accepts the connected socket."""

    async def _create_connection(  # aiohttp's signature, `timeout` included
        self,
        req: Any,
        traces: Any,
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109
    ) -> ResponseHandler:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(timeout.sock_connect):
                await self._loop.sock_connect(sock, self.path)
            _, protocol = await self._loop.create_unix_connection(self._factory, sock=sock)
        except OSError as exc:  # TimeoutError included
            sock.close()
            raise UnixClientConnectorError(self.path, req.connection_key, exc) from exc
        return protocol


HeadCheck = Callable[[RawRequestMessage], tuple[int, HttpProcessingError] | None]
"""A request head → None to serve it, else the status and error to refuse it with."""


class _CheckedParser:
    """A connection's request parser with `check` on every head it parses.

    The first head refused ends the parsing: the requests before it are served, it gets
    `check`'s answer, and nothing after it is read (the answer closes the connection).
    """

    __slots__ = ("_check", "_parser", "_refused", "message_consumed", "set_upgraded")

    def __init__(self, parser: Any, check: HeadCheck) -> None:
        self._parser = parser
        self._check = check
        self._refused = False
        # Called once per request (`start`, after an upgrade): the parser's own bound methods,
        # so these cost what they cost unwrapped (through __getattr__, 1.3 µs each).
        self.message_consumed = parser.message_consumed
        self.set_upgraded = parser.set_upgraded

    def feed_data(self, data: bytes) -> tuple[list[Any], bool, bytes]:
        if self._refused:
            return [], False, b""
        messages, upgraded, tail = self._parser.feed_data(data)
        check = self._check
        for index, (message, _) in enumerate(messages):
            refusal = check(message) if isinstance(message, RawRequestMessage) else None
            if refusal is not None:
                self._refused = True
                status, exc = refusal
                answer = (_ErrInfo(status=status, exc=exc, message=exc.message), EMPTY_PAYLOAD)
                return [*messages[:index], answer], False, b""
        return messages, upgraded, tail

    def __getattr__(self, name: str) -> Any:  # pause_reading, feed_eof, …: rarely called
        return getattr(self._parser, name)


def check_request_heads(handler: RequestHandler, check: HeadCheck) -> None:
    """Refuse the request heads `check` refuses as aiohttp refuses a malformed one."""
    # A stand-in with the parser's interface (feed_data, and the rest passed through): aiohttp
    # calls it only through those names, so the cast states what it is used as.
    handler._parser = cast("HttpParser[Any]", _CheckedParser(handler._parser, check))


def server_handler_kwargs(server: web.Server) -> dict[str, Any]:
    """The settings `server()` would build each `RequestHandler` with (limits, access log, …).

    aiohttp keeps them only in `Server._kwargs`; the gateway's connection factory builds a
    `GatewayProtocol` instead of calling `server()`, and must hand it the same settings.
    """
    kwargs: dict[str, Any] = server._kwargs
    return kwargs


__all__ = [
    "NO_EXTENSIONS",
    "BadHttpMessage",
    "BaseProtocol",
    "BaseTimerContext",
    "Handler",
    "HeadCheck",
    "HttpProcessingError",
    "LazyReadTimeoutProtocol",
    "LineTooLong",
    "Middleware",
    "OneWriteResponse",
    "RawRequestMessage",
    "RelayResponse",
    "ResponseHandler",
    "SiblingConnector",
    "StreamWriter",
    "TimeoutHandle",
    "check_request_heads",
    "server_handler_kwargs",
]
