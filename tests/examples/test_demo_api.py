"""Tests for the bundled demo legacy API (examples/demo_api.py).

The gateway's mappings are tried against these shapes, so the tests pin the
status, content type, key body fields and retry/auth headers of each endpoint.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from pytest_aiohttp import AiohttpClient

from examples.demo_api import (
    BLOB_DEFAULT_SIZE,
    BLOB_MAX_SIZE,
    INVALID_QUANTITY,
    MALFORMED_BODY,
    MISSING_QUANTITY,
    build_app,
    parse_listen,
)


@dataclass(frozen=True)
class Case:
    """One request against the demo API and what must come back."""

    method: str
    path: str
    status: int
    content_type: str
    request_json: object = None
    json_equals: object = None
    json_subset: Mapping[str, object] = field(default_factory=dict)
    text_contains: tuple[str, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    body_length: int | None = None


ITEM_2 = {"id": 2, "name": "gadget", "price_cents": 1299}

CASES: dict[str, Case] = {
    "health": Case("GET", "/health", 200, "application/json", json_equals={"status": "ok"}),
    "items-list": Case(
        "GET",
        "/v1/items",
        200,
        "application/json",
        json_equals=[
            {"id": 1, "name": "widget", "price_cents": 499},
            ITEM_2,
            {"id": 3, "name": "gizmo", "price_cents": 2599},
        ],
    ),
    "item-found": Case("GET", "/v1/items/2", 200, "application/json", json_equals=ITEM_2),
    "item-not-found": Case(
        "GET",
        "/v1/items/42",
        404,
        "application/problem+json",
        json_equals={
            "type": "https://demo.example/problems/not-found",
            "title": "Not Found",
            "status": 404,
            "detail": "Item 42 does not exist",
            "instance": "/v1/items/42",
        },
    ),
    "order-created": Case(
        "POST",
        "/v1/orders",
        201,
        "application/json",
        request_json={"quantity": 3},
        json_subset={"quantity": 3, "status": "created"},
    ),
    "order-missing-quantity": Case(
        "POST",
        "/v1/orders",
        400,
        "application/json",
        request_json={"item_id": 1},
        json_subset={
            "status": 400,
            "error": "Bad Request",
            "message": MISSING_QUANTITY,
            "path": "/v1/orders",
        },
    ),
    "me-expired-token": Case(
        "GET",
        "/v1/me",
        401,
        "application/json",
        json_equals={
            "error": "invalid_token",
            "error_description": "The access token expired at 2026-07-01T00:00:00Z",
        },
        headers={
            "WWW-Authenticate": (
                'Bearer error="invalid_token", error_description="The access token expired"'
            )
        },
    ),
    "delete-forbidden": Case(
        "DELETE",
        "/v1/items/1",
        403,
        "application/json",
        json_equals={
            "error": {"code": "forbidden", "message": "Role 'viewer' may not delete items"}
        },
    ),
    "users-validation": Case(
        "POST",
        "/v1/users",
        422,
        "application/json",
        request_json={"email": "nope", "age": 0},
        json_equals={
            "detail": [
                {
                    "loc": ["body", "email"],
                    "msg": "value is not a valid email address",
                    "type": "value_error.email",
                },
                {
                    "loc": ["body", "age"],
                    "msg": "ensure this value is greater than 0",
                    "type": "value_error.number.not_gt",
                },
            ]
        },
    ),
    "search-rate-limited": Case(
        "GET",
        "/v1/search?q=x",
        429,
        "application/json",
        json_equals={"message": "Rate limit exceeded: 10 requests per second"},
        headers={"Retry-After": "2"},
    ),
    "report-html-500": Case(
        "GET",
        "/v1/report",
        500,
        "text/html",
        text_contains=("<title>500 Internal Server Error</title>", "NullPointerException"),
    ),
    "status-maintenance": Case(
        "GET",
        "/v1/status",
        503,
        "application/json",
        json_equals={"error": "Service Unavailable", "message": "Maintenance in progress"},
        headers={"Retry-After": "5"},
    ),
    "blob-sized": Case(
        "GET",
        "/v1/blob?size=200000",
        200,
        "application/octet-stream",
        body_length=200_000,
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
async def test_endpoint_contract(aiohttp_client: AiohttpClient, case: Case) -> None:
    client = await aiohttp_client(build_app())
    async with client.request(case.method, case.path, json=case.request_json) as resp:
        body = await resp.read()
        assert resp.status == case.status
        assert resp.content_type == case.content_type
        for name, value in case.headers.items():
            assert resp.headers.get(name) == value
    if case.json_equals is not None:
        assert json.loads(body) == case.json_equals
    if case.json_subset:
        parsed = json.loads(body)
        assert {key: parsed.get(key) for key in case.json_subset} == dict(case.json_subset)
    text = body.decode("utf-8")
    for fragment in case.text_contains:
        assert fragment in text
    if case.body_length is not None:
        assert len(body) == case.body_length
        assert resp.content_length == case.body_length


async def test_spring_timestamp_is_iso8601(aiohttp_client: AiohttpClient) -> None:
    client = await aiohttp_client(build_app())
    resp = await client.post("/v1/orders")
    body = await resp.json()
    assert resp.status == 400
    assert body["message"] == MISSING_QUANTITY
    assert datetime.fromisoformat(body["timestamp"]).tzinfo is not None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"quantity": 0}', INVALID_QUANTITY),
        (b'{"quantity": "2"}', INVALID_QUANTITY),
        (b'{"quantity": true}', INVALID_QUANTITY),
        (b"[1, 2]", MISSING_QUANTITY),
        (b"{not json", MALFORMED_BODY),
    ],
    ids=["zero", "string", "bool", "not-object", "malformed"],
)
async def test_order_rejections(
    aiohttp_client: AiohttpClient, payload: bytes, message: str
) -> None:
    client = await aiohttp_client(build_app())
    resp = await client.post(
        "/v1/orders", data=payload, headers={"Content-Type": "application/json"}
    )
    body = await resp.json()
    assert resp.status == 400
    assert body["message"] == message


async def test_not_found_echoes_requested_id(aiohttp_client: AiohttpClient) -> None:
    client = await aiohttp_client(build_app())
    resp = await client.get("/v1/items/abc")
    body = await resp.json(content_type="application/problem+json")
    assert resp.status == 404
    assert body["detail"] == "Item abc does not exist"
    assert body["instance"] == "/v1/items/abc"


@pytest.mark.parametrize(
    ("query", "expected"),
    [("", BLOB_DEFAULT_SIZE), ("?size=0", 0), ("?size=65537", 65_537)],
    ids=["default-1MiB", "empty", "chunk-plus-one"],
)
async def test_blob_sizes(aiohttp_client: AiohttpClient, query: str, expected: int) -> None:
    client = await aiohttp_client(build_app())
    resp = await client.get(f"/v1/blob{query}")
    body = await resp.read()
    assert resp.status == 200
    assert resp.content_length == expected
    assert len(body) == expected


async def test_blob_size_is_capped(aiohttp_client: AiohttpClient) -> None:
    client = await aiohttp_client(build_app())
    resp = await client.get(f"/v1/blob?size={BLOB_MAX_SIZE * 4}")
    assert resp.status == 200
    assert resp.content_length == BLOB_MAX_SIZE
    received = 0
    async for chunk in resp.content.iter_chunked(1024 * 1024):
        received += len(chunk)
    assert received == BLOB_MAX_SIZE


async def test_blob_head_sends_headers_only(aiohttp_client: AiohttpClient) -> None:
    client = await aiohttp_client(build_app())
    resp = await client.head("/v1/blob?size=1000")
    assert resp.status == 200
    assert resp.headers["Content-Length"] == "1000"
    assert await resp.read() == b""


@pytest.mark.parametrize("size", ["abc", "-1"], ids=["non-integer", "negative"])
async def test_blob_rejects_bad_size(aiohttp_client: AiohttpClient, size: str) -> None:
    client = await aiohttp_client(build_app())
    resp = await client.get("/v1/blob", params={"size": size})
    assert resp.status == 400
    assert "size" in (await resp.json())["error"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("127.0.0.1:9000", ("127.0.0.1", 9000)), ("[::1]:8080", ("::1", 8080))],
    ids=["ipv4", "ipv6"],
)
def test_parse_listen(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize(
    "value",
    ["9000", "host:", ":9000", "host:99999"],
    ids=["no-host", "no-port", "empty-host", "port-out-of-range"],
)
def test_parse_listen_rejects(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected HOST:PORT"):
        parse_listen(value)


@pytest.mark.parametrize(
    ("csv", "status", "expected"),
    [
        ("a,b,c\n1,2,3\n", 200, {"rows": [{"a": "1", "b": "2", "c": "3"}]}),
        ("a,b,c\n1,2,3,4\n", 400, {"error": "Row at line 2 has 4 columns, expected 3"}),
        ("", 400, {"error": "Empty CSV: expected a header row"}),
    ],
    ids=["ok", "ragged", "empty"],
)
async def test_csv_normalize(
    aiohttp_client: AiohttpClient, csv: str, status: int, expected: dict[str, object]
) -> None:
    client = await aiohttp_client(build_app())
    response = await client.post("/v1/csv/normalize", data=csv)
    assert response.status == status
    assert await response.json() == expected
