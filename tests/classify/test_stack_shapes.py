"""Failures in the shapes of stacks outside the Python and Node world, read through a real
`mendpoint serve --upstream` on the embedded default (docs/rules.md#status-and-body): a SOAP
fault says whose it is by its code (docs/rules.md#soap-faults), JSend's `fail` names the
fields at fault (docs/rules.md#jsend), and the words reach `error.message` from a bare JSON
string, `statusMessage` and a `reason` beside or under `error`
(docs/rules.md#message_paths-and-extra_message_paths-config), and a 500 saying the request's
body was not JSON is the caller's to fix (docs/rules.md#status-and-body)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.support.gateway import StartUpstream, start_process, stop_process, wait_ready
from tests.support.ports import free_port

SOAP11 = (
    '<?xml version="1.0"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">'
    "<soap:Body><soap:Fault><faultcode>soap:{code}</faultcode>"
    "<faultstring>{text}</faultstring></soap:Fault></soap:Body></soap:Envelope>"
)
SOAP12 = (
    '<?xml version="1.0"?><env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope">'
    "<env:Body><env:Fault><env:Code><env:Value>env:{code}</env:Value></env:Code>"
    '<env:Reason><env:Text xml:lang="en">{text}</env:Text></env:Reason>'
    "</env:Fault></env:Body></env:Envelope>"
)


@dataclass(frozen=True)
class Shape:
    """What the upstream answers on `path`, and what the caller must read through the gateway."""

    path: str
    status: int
    content_type: str
    body: str
    expect: dict[str, Any]
    method: str = "POST"


SHAPES = [
    Shape(
        "/soap11-client",
        500,
        "text/xml; charset=utf-8",
        SOAP11.format(code="Client.InvalidAccount", text="Account number 12AB is not numeric"),
        {
            "code": "SOAP_CLIENT_FAULT",
            "retryable": False,
            "message": "Account number 12AB is not numeric",
            "fix_required": 'Correct the request as the SOAP fault says ("Account number 12AB'
            ' is not numeric"), then reissue it',
        },
    ),
    Shape(
        "/soap12-sender",
        400,
        "application/soap+xml",
        SOAP12.format(code="Sender", text="The quantity must be positive"),
        {"code": "SOAP_CLIENT_FAULT", "message": "The quantity must be positive"},
    ),
    Shape(
        "/soap11-busy",
        500,
        "text/xml",
        SOAP11.format(code="Server", text="Service temporarily unavailable, try again later"),
        {"code": "SOAP_SERVICE_UNAVAILABLE", "retryable": True, "retry_after_ms": 1000},
    ),
    Shape(
        "/soap12-busy",
        500,
        "application/soap+xml",
        SOAP12.format(code="Receiver", text="The ledger is unavailable"),
        {"code": "SOAP_SERVICE_UNAVAILABLE", "retryable": True},
    ),
    # A server fault that says nothing of trying again is the service's failure: a stop.
    Shape(
        "/soap11-server",
        500,
        "text/xml",
        SOAP11.format(code="Server", text="java.lang.NullPointerException"),
        {"code": "UPSTREAM_INTERNAL_ERROR", "retryable": False, "fix_required": None},
    ),
]


JSON = "application/json"
FIX_BODY = (
    "Send a well-formed JSON body (the message says where it broke), then reissue the request"
)
SHAPES += [
    Shape(
        "/jsend-fail",
        400,
        JSON,
        json.dumps({"status": "fail", "data": {"title": "A title is required"}}),
        {
            "code": "VALIDATION_FAILED",
            "message": "title: A title is required",
            "fields": [{"field": "title", "message": "A title is required"}],
        },
    ),
    # A framework that answers every failure with 500: JSend's `fail` still says whose it is.
    Shape(
        "/jsend-fail-500",
        500,
        JSON,
        json.dumps({"status": "fail", "data": {"email": "is not an address", "age": ["< 0"]}}),
        {
            "code": "VALIDATION_FAILED",
            "retryable": False,
            "message": "email: is not an address; age: < 0",
        },
    ),
    Shape(
        "/jsend-error",
        500,
        JSON,
        json.dumps({"status": "error", "message": "Unable to communicate with database"}),
        {"code": "UPSTREAM_INTERNAL_ERROR", "message": "Unable to communicate with database"},
    ),
    Shape(
        "/bare-string",
        400,
        JSON,
        json.dumps("quantity must be positive"),
        {"code": "BAD_REQUEST", "message": "quantity must be positive"},
    ),
    Shape(
        "/status-message",
        400,
        JSON,
        json.dumps({"statusCode": 400, "statusMessage": "The slug is already taken"}),
        {"message": "The slug is already taken"},
        method="GET",
    ),
    Shape(
        "/couchdb",
        404,
        JSON,
        json.dumps({"error": "not_found", "reason": "Database does not exist."}),
        {"code": "NOT_FOUND", "message": "Database does not exist."},
        method="GET",
    ),
    Shape(
        "/elasticsearch",
        404,
        JSON,
        json.dumps(
            {
                "error": {"type": "index_not_found_exception", "reason": "no such index [orders]"},
                "status": 404,
            }
        ),
        {"message": "no such index [orders]"},
        method="GET",
    ),
]

# A body the framework could not parse, answered 500 (docs/rules.md#status-and-body): the
# caller's to fix where the request sent one, the server's own on a GET.
SPRING_NOT_READABLE = {
    "status": 500,
    "error": "Internal Server Error",
    "message": "JSON parse error: Unexpected character ('<' (code 60)): expected a valid value",
    "path": "/spring-body",
}
SHAPES += [
    Shape(
        "/spring-body",
        500,
        JSON,
        json.dumps(SPRING_NOT_READABLE),
        {"code": "MALFORMED_JSON", "retryable": False, "message": SPRING_NOT_READABLE["message"]},
    ),
    Shape(
        "/go-body",
        500,
        "text/plain; charset=utf-8",
        "invalid character '<' looking for beginning of value\n",
        {"code": "MALFORMED_JSON", "fix_required": FIX_BODY},
        method="PUT",
    ),
    Shape(
        "/get-decode",
        500,
        JSON,
        json.dumps({"detail": "Expecting value: line 1 column 1 (char 0)"}),
        {"code": "UPSTREAM_INTERNAL_ERROR", "fix_required": None},
        method="GET",
    ),
]


def shapes_app() -> web.Application:
    answers = {shape.path: shape for shape in SHAPES}

    async def answer(request: web.Request) -> web.Response:
        shape = answers[request.path]
        await request.read()
        headers = {"Content-Type": shape.content_type}
        return web.Response(status=shape.status, body=shape.body.encode(), headers=headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    return app


@pytest.fixture
async def gateway(start_upstream: StartUpstream) -> AsyncIterator[str]:
    upstream = await start_upstream(shapes_app())
    port, admin = free_port(), free_port()
    argv = ["serve", "--upstream", upstream, "--listen", f"127.0.0.1:{port}"]
    process = await start_process(*argv, "--admin", f"127.0.0.1:{admin}")
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        code, stderr = await stop_process(process)
        assert code == 0, stderr


async def test_each_stacks_shape_reads_as_its_own_words_say(gateway: str) -> None:
    got, want = {}, {}
    async with aiohttp.ClientSession() as session:
        for shape in SHAPES:
            headers = {"X-Error-Format": "envelope", "Accept": "application/json"}
            url = gateway + shape.path
            async with session.request(shape.method, url, headers=headers, data=b"<x/>") as r:
                assert r.status == shape.status, shape.path
                error = (await r.json())["error"]
            got[shape.path] = {key: error.get(key) for key in shape.expect}
            want[shape.path] = shape.expect
    assert got == want
