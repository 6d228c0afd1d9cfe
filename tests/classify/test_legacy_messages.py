"""The upstream's own words in the shapes older APIs write them: `errorMessage`,
`errorDescription`, `msg` in JSON, a SOAP fault's `<faultstring>` or `<Reason>`, a
`<reason>` in XML, read by default through a real `mendpoint serve` (the embedded config,
no rule of one's own), and which key wins where a body has several."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from gateway.classify.html_message import xml_message
from gateway.config.models import DEFAULT_MESSAGE_PATHS
from tests.support.gateway import StartUpstream, start_process, stop_process, wait_ready
from tests.support.ports import free_port

SOAP11 = (
    '<?xml version="1.0"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">'
    "<soap:Body><soap:Fault><faultcode>soap:Client</faultcode>"
    "<faultstring>Account 1234 is closed</faultstring></soap:Fault></soap:Body></soap:Envelope>"
)
SOAP12 = (
    '<?xml version="1.0"?><env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope">'
    "<env:Body><env:Fault><env:Code><env:Value>env:Sender</env:Value></env:Code>"
    '<env:Reason><env:Text xml:lang="en">Order 42 is &lt;locked&gt;</env:Text></env:Reason>'
    "</env:Fault></env:Body></env:Envelope>"
)
# (path, status, content type, body, the message the caller reads)
CASES = [
    (
        "/salesforce",
        401,
        "application/json",
        json.dumps({"errorCode": "INVALID_SESSION_ID", "errorMessage": "Session expired"}),
        "Session expired",
    ),
    (
        "/jwt",
        401,
        "application/json",
        json.dumps({"msg": "Token has expired"}),
        "Token has expired",
    ),
    (
        "/oauth",
        400,
        "application/json",
        json.dumps({"error": "invalid_request", "errorDescription": "redirect_uri is unknown"}),
        "redirect_uri is unknown",
    ),
    # `message` comes first; one that only repeats the status gives way to the next key.
    (
        "/both",
        400,
        "application/json",
        json.dumps({"message": "quantity is required", "errorMessage": "bad input"}),
        "quantity is required",
    ),
    (
        "/status-only",
        400,
        "application/json",
        json.dumps({"message": "Bad Request", "errorMessage": "quantity is required"}),
        "quantity is required",
    ),
    ("/soap11", 500, "text/xml; charset=utf-8", SOAP11, "Account 1234 is closed"),
    ("/soap12", 400, "application/soap+xml", SOAP12, "Order 42 is <locked>"),
    (
        "/xml-reason",
        409,
        "application/xml",
        "<error><code>LOCKED</code><reason>the cart is being checked out</reason></error>",
        "the cart is being checked out",
    ),
    # `<Message>` is the most specific of the XML elements, as `message` is in JSON.
    (
        "/xml-both",
        400,
        "application/xml",
        "<Error><Message>The key is too long</Message><Reason>Bad Request</Reason></Error>",
        "The key is too long",
    ),
]


def legacy_app() -> web.Application:
    answers = {path: (status, ctype, body) for path, status, ctype, body, _ in CASES}

    async def answer(request: web.Request) -> web.Response:
        status, ctype, body = answers[request.path]
        return web.Response(status=status, body=body.encode(), headers={"Content-Type": ctype})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    return app


@pytest.fixture
async def legacy_gateway(start_upstream: StartUpstream) -> AsyncIterator[str]:
    upstream = await start_upstream(legacy_app())
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


async def test_the_older_shapes_words_reach_the_caller(legacy_gateway: str) -> None:
    got = {}
    async with aiohttp.ClientSession() as session:
        for path, status, _, _, _ in CASES:
            headers = {"X-Error-Format": "envelope"}
            async with session.get(legacy_gateway + path, headers=headers) as response:
                assert response.status == status
                got[path] = (await response.json())["error"]["message"]
    assert got == {path: message for path, _, _, _, message in CASES}


def test_the_message_keys_in_the_order_they_win() -> None:
    paths = list(DEFAULT_MESSAGE_PATHS)
    # Each legacy key right after its current spelling; msg before the string `error`.
    assert paths.index("errorMessage") == paths.index("Message") + 1
    assert paths.index("errorDescription") == paths.index("error_description") + 1
    assert paths.index("message") < paths.index("errorMessage") < paths.index("msg")
    assert paths.index("msg") < paths.index("error") < paths.index("title")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("<error><reason><![CDATA[a <raw> reason]]></reason></error>", "a <raw> reason"),
        ("<r><message>Not Found</message><reason>it was deleted</reason></r>", "it was deleted"),
        ("<r><message>Not Found</message></r>", "Not Found"),  # kept when nothing says more
        ("<r><messages>plural</messages><code>E1</code></r>", None),
        ("<r><faultcode>soap:Server</faultcode></r>", None),  # a code is never the message
        ('<m:Message xmlns:m="urn:x" lang="en">\n  prefixed\n</m:Message>', "prefixed"),
    ],
    ids=["cdata", "status-only-gives-way", "status-only-kept", "no-element", "code", "prefix"],
)
def test_an_xml_documents_words(document: str, message: str | None) -> None:
    assert xml_message(document) == message
