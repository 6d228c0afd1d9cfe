"""Additive mode, direct and through the gateway with httpx: the upstream's body survives.

What the gateway sends is the direct body with members inserted and nothing else changed:
numbers a parser would round (`1e400`, `12345678901234567890.5`, `1.10`), duplicate names,
whitespace, and a body in another charset, which is decoded as declared and encoded back the
same way (docs/transparency.md, Additive mode). A body that cannot be decoded as declared
passes byte for byte, with the advisory headers only.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.support.gateway import StartGateway, StartUpstream, route_config

NUMBERS = b'{"message": "Bad amount",\n "big": 1e400, "long": 12345678901234567890.5,\n' + (
    b' "zeros": 1.10, "k": 1, "k": 2, "error": {"code": "E_AMOUNT" }  }'
)
LATIN1 = '{"message":"Ungültige Menge: ½"}'.encode("iso-8859-1")
LATIN1_TYPE = "application/json; charset=iso-8859-1"
UTF16 = '{"message":"Ungültige ✓"}'.encode("utf-16")  # a BOM, then little-endian
CASES: dict[str, tuple[bytes, str]] = {
    "numbers": (NUMBERS, "application/json"),
    "latin1": (LATIN1, LATIN1_TYPE),
    "utf16-bom": (UTF16, "application/json"),
    "undecodable": (b'{"message":"\xff\xfe bad"}', "application/json; charset=utf-8"),
    "unknown-charset": (b'{"message":"x"}', "application/json; charset=x-no-such"),
    "latin1-text": ("Ungültige Menge\n".encode("iso-8859-1"), "text/plain; charset=iso-8859-1"),
}


def app() -> web.Application:
    async def failing(request: web.Request) -> web.Response:
        body, content_type = CASES[request.match_info["case"]]
        return web.Response(status=400, body=body, headers={"Content-Type": content_type})

    application = web.Application()
    application.router.add_get("/{case}", failing)
    return application


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(name)

    return json.loads(text, parse_constant=refuse, parse_float=str, parse_int=str)


async def _both(
    case: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> tuple[httpx.Response, httpx.Response]:
    upstream = await start_upstream(app())
    gateway = await start_gateway(route_config(upstream, mode="additive"))
    async with httpx.AsyncClient() as client:
        direct = await client.get(f"{upstream}/{case}")
        proxied = await client.get(f"{gateway.url}/{case}")
    assert proxied.status_code == direct.status_code == 400
    assert proxied.headers["Content-Type"] == direct.headers["Content-Type"]
    assert proxied.headers["Content-Length"] == str(len(proxied.content))
    return direct, proxied


async def test_numbers_duplicates_and_whitespace_survive_as_written(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    direct, proxied = await _both("numbers", start_upstream, start_gateway)
    error_end = direct.content.index(b'"E_AMOUNT"') + len(b'"E_AMOUNT"')
    after_error = direct.content[error_end:]  # b' }  }'
    assert proxied.content.startswith(direct.content[:error_end] + b',"message":"Bad amount"')
    assert proxied.content.endswith(b'"recovery_available":false  }')
    rest = proxied.content[error_end:]
    assert rest.replace(rest[: rest.index(b" }")], b"", 1).startswith(after_error[:2])
    body = _strict(proxied.text)
    assert (body["big"], body["long"], body["zeros"], body["k"]) == (
        "1e400",
        "12345678901234567890.5",
        "1.10",
        "2",
    )
    assert body["error"]["code"] == "E_AMOUNT"
    assert body["error"]["request_id"] == proxied.headers["X-Request-Id"]


@pytest.mark.parametrize("case", ["latin1", "utf16-bom"])
async def test_a_body_in_another_charset_keeps_it(
    case: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    direct, proxied = await _both(case, start_upstream, start_gateway)
    raw, _ = CASES[case]
    codec = "iso-8859-1" if case == "latin1" else "utf-16"  # the BOM says which order
    closing = len("}".encode(codec)) - (2 if codec == "utf-16" else 0)  # less the BOM
    assert proxied.content.startswith(raw[:-closing])
    assert proxied.content.endswith(raw[-closing:])
    text = proxied.content.decode(codec)
    assert "\ufffd" not in text
    body, sent = _strict(text), _strict(direct.content.decode(codec))
    assert body["message"] == sent["message"]
    assert body["error"]["message"] == sent["message"]
    assert body["failure"]["code"] == proxied.headers["X-Error-Code"]


@pytest.mark.parametrize("case", ["undecodable", "unknown-charset"])
async def test_a_body_that_cannot_be_decoded_as_declared_passes_untouched(
    case: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    direct, proxied = await _both(case, start_upstream, start_gateway)
    assert proxied.content == direct.content
    assert proxied.headers["X-Error-Code"] == "BAD_REQUEST"


async def test_the_envelope_keeps_the_original_text_in_its_charset(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(app())
    gateway = await start_gateway(route_config(upstream, mode="envelope"))
    async with httpx.AsyncClient() as client:
        json_body = (await client.get(f"{gateway.url}/latin1")).json()
        text_body = (await client.get(f"{gateway.url}/latin1-text")).json()
    assert json_body["meta"]["original"] == {
        "content_type": LATIN1_TYPE,
        "body": {"message": "Ungültige Menge: ½"},
    }
    assert json_body["error"]["message"] == "Ungültige Menge: ½"
    assert text_body["meta"]["original"]["body"] == "Ungültige Menge\n"
