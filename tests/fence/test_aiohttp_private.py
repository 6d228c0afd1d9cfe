"""Each private aiohttp name the gateway relies on, checked against the installed aiohttp.

gateway/fence/aiohttp_private.py is the one module that touches them (the last test here
keeps it so). When an aiohttp upgrade removes or changes one, the test named after it fails
with the name in its message: read that module's docstring for why the name is used, adapt
it, then widen the aiohttp pin in pyproject.toml.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import inspect
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_exceptions import SocketTimeoutError
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import RawRequestMessage
from aiohttp.web_protocol import RequestHandler, _ErrInfo
from pytest_aiohttp import AiohttpClient

from gateway.config.models import LimitsSpec
from gateway.exchange.upstream.round_trip import Exchange
from gateway.fence.aiohttp_private import (
    OneWriteResponse,
    RelayResponse,
    SiblingConnector,
    check_request_heads,
    server_handler_kwargs,
)
from tests.support.paths import PACKAGE

HANDLER = "aiohttp.client_proto.ResponseHandler"


def parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def calls(function: Callable[..., Any]) -> set[str]:
    """The attribute names a function's code uses (`self.<name>` included)."""
    return set(function.__code__.co_names)


def test_reschedule_timeout_is_called_on_every_read() -> None:
    """Overridden by the lazy sock_read timer: useless unless aiohttp still calls it."""
    name = "_reschedule_timeout"
    method = getattr(ResponseHandler, name, None)
    assert callable(method), f"{HANDLER}.{name} is gone"
    assert parameters(method) == ["self"], f"{HANDLER}.{name} changed its signature"
    for caller in (ResponseHandler.data_received, ResponseHandler.start_timeout):
        assert name in calls(caller), f"{HANDLER}.{caller.__name__} no longer calls {name}"


def test_flow_control_pause_stops_and_resume_restarts_the_timer() -> None:
    """The lazy timer keeps its handle through `pause_reading` (hidden from aiohttp's
    `_drop_timeout` there) and relies on `resume_reading` calling `_reschedule_timeout`."""
    pause, resume = ResponseHandler.pause_reading, ResponseHandler.resume_reading
    assert "_drop_timeout" in calls(pause), f"{HANDLER}.pause_reading no longer stops the timer"
    assert "_reschedule_timeout" in calls(resume), (
        f"{HANDLER}.resume_reading no longer restarts the timer"
    )


async def test_reading_paused_is_set_by_pause_reading() -> None:
    """`_check_read_timeout` reads `_reading_paused` to tell a pause from a silent upstream."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        _, protocol = await loop.create_connection(lambda: ResponseHandler(loop), sock=ours)
        protocol.set_response_params(read_timeout=5.0)
        theirs.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        await protocol.read()  # the head: the parser now expects body bytes
        assert getattr(protocol, "_reading_paused", None) is False, (
            f"{HANDLER}._reading_paused is gone"
        )
        protocol.pause_reading()
        assert protocol._reading_paused is True, f"{HANDLER}._reading_paused not set on pause"
        protocol.resume_reading()
        assert protocol._reading_paused is False, f"{HANDLER}._reading_paused kept on resume"
        protocol.close()


async def test_read_timeout_holds_the_configured_seconds() -> None:
    protocol = ResponseHandler(asyncio.get_running_loop())
    protocol.set_response_params(read_timeout=7.0)
    assert getattr(protocol, "_read_timeout", None) == 7.0, (
        f"{HANDLER}._read_timeout no longer holds set_response_params(read_timeout=…)"
    )


async def test_read_timeout_handle_is_the_armed_timer() -> None:
    protocol = ResponseHandler(asyncio.get_running_loop())
    name = "_read_timeout_handle"
    assert hasattr(protocol, name), f"{HANDLER}.{name} is gone"
    assert getattr(protocol, name) is None, f"{HANDLER}.{name} is set before any timeout"
    protocol.set_response_params(read_timeout=5.0)
    protocol.start_timeout()
    handle = getattr(protocol, name)
    # asyncio's TimerHandle, or uvloop's (not a subclass): what the gateway uses of it.
    assert callable(getattr(handle, "cancel", None)), f"{HANDLER}.{name} is not a timer handle"
    assert handle.when() > asyncio.get_running_loop().time(), f"{HANDLER}.{name} is not armed"
    handle.cancel()
    assert handle.cancelled()


async def test_drop_timeout_cancels_the_timer() -> None:
    name = "_drop_timeout"
    protocol = ResponseHandler(asyncio.get_running_loop())
    method = getattr(protocol, name, None)
    assert callable(method), f"{HANDLER}.{name} is gone"
    assert parameters(method) == [], f"{HANDLER}.{name} changed its signature"
    protocol.set_response_params(read_timeout=5.0)
    protocol.start_timeout()
    handle = protocol._read_timeout_handle
    method()
    assert handle is not None and handle.cancelled(), f"{HANDLER}.{name} no longer cancels"
    assert protocol._read_timeout_handle is None, f"{HANDLER}.{name} leaves the handle set"


async def test_on_read_timeout_fails_the_reader() -> None:
    name = "_on_read_timeout"
    protocol = ResponseHandler(asyncio.get_running_loop())
    method = getattr(protocol, name, None)
    assert callable(method), f"{HANDLER}.{name} is gone"
    assert parameters(method) == [], f"{HANDLER}.{name} changed its signature"
    method()
    assert isinstance(protocol.exception(), SocketTimeoutError), (
        f"{HANDLER}.{name} no longer fails the reader with SocketTimeoutError"
    )


async def test_loop_is_the_protocols_event_loop() -> None:
    loop = asyncio.get_running_loop()
    assert getattr(ResponseHandler(loop), "_loop", None) is loop, f"{HANDLER}._loop is gone"


def prepared_then_body(
    response_class: type[web.StreamResponse], written: dict[str, int] | None = None
) -> Callable[..., Any]:
    """A handler that prepares a `response_class` answer, then writes b"body" and ends it;
    `written` gets what had reached the socket right after `prepare`, by class name."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = response_class(status=200)
        await response.prepare(request)
        if written is not None:
            written[response_class.__name__] = request.writer.output_size
        await response.write_eof(b"body")
        return response

    return handler


async def test_prepare_headers_is_where_the_default_content_type_is_added(
    aiohttp_client: AiohttpClient,
) -> None:
    """aiohttp still invents application/octet-stream (else the override is moot) and the
    `_prepare_headers` override still removes it."""
    name = "aiohttp.web.StreamResponse._prepare_headers"
    method = getattr(web.StreamResponse, "_prepare_headers", None)
    assert method is not None and inspect.iscoroutinefunction(method), f"{name} is gone"
    assert parameters(method) == ["self"], f"{name} changed its signature"

    app = web.Application()
    app.router.add_get("/plain", prepared_then_body(web.StreamResponse))
    app.router.add_get("/relay", prepared_then_body(RelayResponse))
    client = await aiohttp_client(app)
    plain = await client.get("/plain")
    relayed = await client.get("/relay")
    assert plain.headers.get("Content-Type") == "application/octet-stream"
    assert "Content-Type" not in relayed.headers, f"overriding {name} no longer takes effect"
    assert await relayed.read() == b"body"


async def test_send_headers_immediately_decides_whether_prepare_writes_the_head(
    aiohttp_client: AiohttpClient,
) -> None:
    """A StreamResponse still writes its head when prepared (else the override is moot) and
    a OneWriteResponse keeps it until the body: nothing reaches the socket before then."""
    name = "aiohttp.web.StreamResponse._send_headers_immediately"
    assert getattr(web.StreamResponse, "_send_headers_immediately", None) is True, f"{name} is gone"
    assert "_send_headers_immediately" in calls(web.StreamResponse._write_headers), (
        f"{name} is no longer what _write_headers consults"
    )
    written: dict[str, int] = {}
    app = web.Application()
    app.router.add_get("/stream", prepared_then_body(web.StreamResponse, written))
    app.router.add_get("/one", prepared_then_body(OneWriteResponse, written))
    client = await aiohttp_client(app)
    for path in ("/stream", "/one"):
        async with client.get(path) as response:
            assert await response.read() == b"body"
    assert written["StreamResponse"] > 0, f"{name}: a prepared StreamResponse no longer writes"
    assert written["OneWriteResponse"] == 0, f"overriding {name} no longer holds the head back"


async def test_server_kwargs_are_the_request_handler_settings() -> None:
    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    name = "aiohttp.web.Server._kwargs"
    server = web.Server(handler, max_line_size=1234, lingering_time=2.5)
    assert server_handler_kwargs(server) == {"max_line_size": 1234, "lingering_time": 2.5}, (
        f"{name} no longer holds the handler settings"
    )
    assert "_kwargs" in calls(web.Server.__call__), f"{name} is no longer what server() uses"


async def test_response_params_accept_every_setting_the_client_passes() -> None:
    """Not underscored, but `aiohttp.client_proto` is internal: its keywords may change."""
    exchange = Exchange(LimitsSpec(), asyncio.get_running_loop())
    passed = {"timer", "skip_payload", *exchange._parsing}
    accepted = set(parameters(ResponseHandler.set_response_params))
    assert passed - accepted == set(), f"{HANDLER}.set_response_params no longer takes them"


def test_unix_connector_creates_its_connections_in_create_connection() -> None:
    name = "aiohttp.UnixConnector._create_connection"
    assert parameters(aiohttp.UnixConnector._create_connection) == [
        "self",
        "req",
        "traces",
        "timeout",
    ], f"{name} changed its signature"
    assert "_create_connection" in calls(aiohttp.BaseConnector.connect), (
        f"{name} is no longer what connect() calls"
    )
    assert "_factory" in calls(aiohttp.UnixConnector._create_connection), (
        "aiohttp.BaseConnector._factory no longer makes the connection's protocol"
    )


def test_the_request_parser_is_what_data_received_feeds() -> None:
    """`check_request_heads` wraps `RequestHandler._parser`: useless unless aiohttp feeds the
    client's bytes through that attribute (data_received, and the tail after an upgrade)."""
    name = "aiohttp.web_protocol.RequestHandler._parser"
    assert "_parser" in calls(RequestHandler.data_received), f"{name} is not what is fed"
    assert "feed_data" in calls(RequestHandler.data_received), f"{name}.feed_data is not called"
    assert "_parser" in calls(RequestHandler.finish_response), f"{name}: upgrade tail moved"
    assert "message_consumed" in calls(RequestHandler.start), f"{name}: the wrapper misses one"


def test_err_info_is_the_value_queued_for_a_refused_head() -> None:
    name = "aiohttp.web_protocol._ErrInfo"
    made = _ErrInfo(status=418, exc=ValueError("x"), message="m")  # the keywords we pass
    assert (made.status, made.message) == (418, "m"), f"{name} changed its fields"
    assert "_ErrInfo" in calls(RequestHandler.data_received), f"{name} is no longer queued"
    assert "_make_error_handler" in calls(RequestHandler.start), (
        f"{name} is no longer answered through handle_error"
    )


async def test_check_request_heads_refuses_a_head_and_serves_the_ones_before_it() -> None:
    """A real server whose connections refuse DELETE heads with a 418: a GET and a DELETE
    pipelined in one write get 200 then 418, and the GET behind them is never handled."""
    seen: list[str] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        seen.append(f"{request.method} {request.path}")
        return web.Response(text="served")

    def refuse_delete(message: RawRequestMessage) -> tuple[int, HttpProcessingError] | None:
        if message.method == "DELETE":
            return 418, HttpProcessingError(code=418, message="no deleting")
        return None

    class Checked(RequestHandler):
        def __init__(self, manager: Any, **kwargs: Any) -> None:
            super().__init__(manager, **kwargs)
            check_request_heads(self, refuse_delete)

    loop = asyncio.get_running_loop()
    server = web.Server(handler, auto_decompress=False)
    listener = await loop.create_server(lambda: Checked(server, loop=loop), "127.0.0.1", 0)
    try:
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
            b"DELETE /b HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        async with asyncio.timeout(5):
            answer = await reader.read(-1)  # the refusal closes the connection
        writer.close()
    finally:
        listener.close()
        await server.shutdown()
    statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", answer)
    assert statuses == [b"200", b"418"], answer
    assert seen == ["GET /a"]


LOOPS = ["asyncio", *(["uvloop"] if importlib.util.find_spec("uvloop") else [])]


@pytest.mark.parametrize("loop_name", LOOPS)
def test_sibling_connector_reaches_an_abstract_socket(loop_name: str) -> None:
    """A worker's socket is in Linux's abstract namespace; uvloop's own unix connection
    refuses such a path (EINVAL), so a relayed bridge request failed as "session not found"."""

    async def exchange() -> tuple[int, bytes]:
        async def hello(request: web.Request) -> web.Response:
            return web.Response(body=b"sibling")

        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        path = f"\0mendpoint-test-{os.getpid()}-{loop_name}"
        await web.UnixSite(runner, path).start()
        try:
            connector = SiblingConnector(path=path)
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.get("http://sibling/") as response,
            ):
                return response.status, await response.read()
        finally:
            await runner.cleanup()

    if loop_name == "uvloop":
        import uvloop

        result = uvloop.run(exchange())
    else:
        result = asyncio.run(exchange())
    assert result == (200, b"sibling")


PRIVATE_NAMES = frozenset(
    {
        "_reschedule_timeout",
        "_read_timeout",
        "_read_timeout_handle",
        "_drop_timeout",
        "_on_read_timeout",
        "_reading_paused",
        "_prepare_headers",
        "_send_headers_immediately",
        "_kwargs",
        "_create_connection",
        "_factory",
        "_ErrInfo",
    }
)  # `_loop` and `_parser` are left out: the gateway's own classes and functions use them too.
OTHERS = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "aiohttp_private.py")


@pytest.mark.parametrize("path", OTHERS, ids=[str(p.relative_to(PACKAGE)) for p in OTHERS])
def test_no_other_module_uses_the_private_names(path: Path) -> None:
    used: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES:
            used.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            node.name in PRIVATE_NAMES
        ):
            used.add(node.name)
        elif isinstance(node, ast.alias) and node.name in PRIVATE_NAMES:
            used.add(node.name)  # imported by name
    assert used == set(), "move these into gateway/fence/aiohttp_private.py"


# What the gateway calls on each of aiohttp's undocumented (non-underscored, not exported)
# names it imports through the fence (gateway/fence/aiohttp_private.py, its docstring).
INTERNAL_MEMBERS: dict[str, tuple[str, ...]] = {
    "ResponseHandler": ("set_response_params", "read", "set_exception", "should_close"),
    "StreamWriter": (
        "write_headers",
        "enable_chunking",
        "send_headers",
        "write",
        "write_eof",
        "set_eof",
    ),
    "TimeoutHandle": ("timer", "start"),
    "BaseTimerContext": ("__enter__", "__exit__"),
    "BaseProtocol": ("pause_writing", "resume_writing", "transport"),
    "RawRequestMessage": ("method", "path", "version", "headers"),
    "HttpProcessingError": ("code", "message"),
    "BadHttpMessage": ("code",),
    "LineTooLong": ("code",),
    "Handler": (),
    "Middleware": (),
}


@pytest.mark.parametrize("name", sorted(INTERNAL_MEMBERS))
def test_each_internal_name_still_has_what_the_gateway_calls(name: str) -> None:
    import gateway.fence.aiohttp_private as fence

    value = getattr(fence, name)
    missing = [m for m in INTERNAL_MEMBERS[name] if not hasattr(value, m)]
    if name == "RawRequestMessage":  # a named tuple: its fields
        missing = [m for m in missing if m not in value._fields]
    elif name in {"HttpProcessingError", "BadHttpMessage", "LineTooLong"}:
        assert issubclass(value, HttpProcessingError), f"{name} is no longer a parse error"
        missing = [m for m in missing if m != "message"]  # set per instance
    assert missing == [], f"aiohttp's {name} no longer has {missing}"


def _imported_from_aiohttp(tree: ast.AST) -> set[tuple[str, str]]:
    """`(module, name)` of every `from aiohttp… import name`; a submodule imported from the
    package (`from aiohttp import helpers`) counts as that module."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        for alias in node.names:
            if module.startswith("aiohttp."):
                found.add((module, alias.name))
            elif module == "aiohttp" and alias.name not in aiohttp.__all__:
                found.add((f"aiohttp.{alias.name}", "*"))
    return found


PUBLIC_MODULES = {"aiohttp.web", "aiohttp.hdrs"}


def test_the_import_check_sees_a_submodule_imported_from_the_package() -> None:
    """The hole `from aiohttp import helpers` then `helpers.NO_EXTENSIONS` once went through."""
    tree = ast.parse("from aiohttp import helpers, web, ClientSession\n")
    assert _imported_from_aiohttp(tree) == {("aiohttp.helpers", "*"), ("aiohttp.web", "*")}


@pytest.mark.parametrize("path", OTHERS, ids=[str(p.relative_to(PACKAGE)) for p in OTHERS])
def test_no_other_module_imports_aiohttp_internals(path: Path) -> None:
    """Outside the fence, aiohttp is used through its exported names (`aiohttp.X` in its
    `__all__`, `aiohttp.web`, `aiohttp.hdrs`) only."""
    internal = sorted(
        f"{module}.{name}"
        for module, name in _imported_from_aiohttp(ast.parse(path.read_text()))
        if module not in PUBLIC_MODULES
    )
    assert internal == [], "import these from gateway/fence/aiohttp_private.py"
