"""Demo "legacy" API that fails the way real stacks fail.

Put the mendpoint gateway in front of this app to see raw, inconsistent error
bodies turned into recovery envelopes. Every error shape below imitates a
framework that agents meet in the wild, so the gateway's mappings can be tried
without a real backend.

Run it with::

    python examples/demo_api.py --listen 127.0.0.1:9000

Endpoints:

=======  ====================  ======  =========================================
Method   Path                  Status  Shape
=======  ====================  ======  =========================================
GET      /health               200     ``{"status":"ok"}``
GET      /v1/items             200     JSON list of three items
GET      /v1/items/{id}        200     item for ids 1..3
GET      /v1/items/{id}        404     RFC 9457 ``application/problem+json``
DELETE   /v1/items/{id}        403     nested ``{"error":{"code","message"}}``
POST     /v1/orders            201     order JSON when ``quantity`` is an int >= 1
POST     /v1/orders            400     Spring Boot default error attributes
GET      /v1/me                401     OAuth 2 bearer error + ``WWW-Authenticate``
POST     /v1/users             422     FastAPI / pydantic ``{"detail":[...]}``
GET      /v1/search            429     ``{"message":...}`` + ``Retry-After: 2``
GET      /v1/report            500     ``text/html`` Tomcat-like error page
GET      /v1/status            503     ``{"error","message"}`` + ``Retry-After: 5``
GET      /v1/blob?size=N       200     N bytes of ``application/octet-stream``
                                       (default 1 MiB, capped at 64 MiB)
GET      /v1/blob?size=bad     400     ``{"error":...}`` for a non-integer size
POST     /v1/csv/normalize     200     CSV text → ``{"rows":[...]}``
POST     /v1/csv/normalize     400     ``{"error":"Row at line 2 has 4 columns, expected 3"}``
=======  ====================  ======  =========================================
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

from aiohttp import web

JSON = "application/json"
PROBLEM_JSON = "application/problem+json"

ITEMS: tuple[Mapping[str, object], ...] = (
    {"id": 1, "name": "widget", "price_cents": 499},
    {"id": 2, "name": "gadget", "price_cents": 1299},
    {"id": 3, "name": "gizmo", "price_cents": 2599},
)

BLOB_DEFAULT_SIZE = 1024 * 1024
BLOB_MAX_SIZE = 64 * 1024 * 1024
BLOB_CHUNK_SIZE = 64 * 1024
# One shared, immutable chunk: streaming reuses it so memory stays O(chunk).
_BLOB_CHUNK = b"\x00" * BLOB_CHUNK_SIZE

MISSING_QUANTITY = "Required request parameter 'quantity' is not present"
INVALID_QUANTITY = "Invalid value for parameter 'quantity': must be an integer >= 1"
MALFORMED_BODY = "JSON parse error: request body is not valid JSON"

TOKEN_EXPIRED_CHALLENGE = (
    'Bearer error="invalid_token", error_description="The access token expired"'
)

REPORT_HTML = """<!doctype html>
<html lang="en"><head><title>500 Internal Server Error</title>
<style type="text/css">body {font-family:Tahoma,Arial,sans-serif;} \
h1 {color:white;background-color:#525D76;}</style></head>
<body><h1>HTTP Status 500 \u2013 Internal Server Error</h1><hr class="line" />
<p><b>Type</b> Exception Report</p>
<p><b>Message</b> Request processing failed: java.lang.NullPointerException</p>
<p><b>Description</b> The server encountered an unexpected condition that \
prevented it from fulfilling the request.</p>
<p><b>Exception</b></p><pre>java.lang.NullPointerException: Cannot invoke \
"com.demo.report.ReportRow.getTotal()" because "row" is null
\tat com.demo.report.ReportService.render(ReportService.java:87)
\tat com.demo.report.ReportController.report(ReportController.java:42)
</pre><hr class="line" /><h3>Apache Tomcat/10.1.24</h3></body></html>
"""


def json_response(
    payload: object,
    *,
    status: int = 200,
    content_type: str = JSON,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """Serialise with ``json.dumps`` so the bytes on the wire are predictable."""
    return web.Response(
        body=json.dumps(payload).encode("utf-8"),
        status=status,
        content_type=content_type,
        headers=headers,
    )


async def health(_request: web.Request) -> web.Response:
    """Liveness probe, so the gateway (and users) can tell the demo is up."""
    return json_response({"status": "ok"})


async def list_items(_request: web.Request) -> web.Response:
    """A healthy collection endpoint, to show the gateway passes 2xx through."""
    return json_response(list(ITEMS))


async def get_item(request: web.Request) -> web.Response:
    """Found items succeed; anything else is an RFC 9457 problem document."""
    raw_id = request.match_info["id"]
    for item in ITEMS:
        if str(item["id"]) == raw_id:
            return json_response(item)
    problem = {
        "type": "https://demo.example/problems/not-found",
        "title": "Not Found",
        "status": 404,
        "detail": f"Item {raw_id} does not exist",
        "instance": request.path,
    }
    return json_response(problem, status=404, content_type=PROBLEM_JSON)


async def delete_item(_request: web.Request) -> web.Response:
    """Every delete is refused, in the nested ``error`` object many APIs use."""
    body = {"error": {"code": "forbidden", "message": "Role 'viewer' may not delete items"}}
    return json_response(body, status=403)


def quantity_problem(raw_body: bytes) -> tuple[int | None, str | None]:
    """Return ``(quantity, None)`` when valid, else ``(None, message)``.

    Kept apart from the handler so the three Spring-style messages (missing,
    invalid, malformed) are decided in one place.
    """
    if not raw_body.strip():
        return None, MISSING_QUANTITY
    try:
        data = json.loads(raw_body)
    except ValueError:
        return None, MALFORMED_BODY
    if not isinstance(data, dict) or "quantity" not in data:
        return None, MISSING_QUANTITY
    quantity = data["quantity"]
    # bool is an int subclass; a JSON ``true`` is not a quantity.
    if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 1:
        return None, INVALID_QUANTITY
    return quantity, None


def spring_bad_request(message: str, path: str) -> web.Response:
    """Mimic Spring Boot's ``DefaultErrorAttributes`` body for a 400."""
    body = {
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "status": 400,
        "error": "Bad Request",
        "message": message,
        "path": path,
    }
    return json_response(body, status=400)


async def create_order(request: web.Request) -> web.Response:
    """Accept a positive integer ``quantity``; otherwise fail like Spring Boot."""
    quantity, message = quantity_problem(await request.read())
    if message is not None:
        return spring_bad_request(message, request.path)
    order = {"id": "ord-1001", "quantity": quantity, "status": "created"}
    return json_response(order, status=201)


async def me(_request: web.Request) -> web.Response:
    """An expired bearer token, reported both in the header and the body."""
    body = {
        "error": "invalid_token",
        "error_description": "The access token expired at 2026-07-01T00:00:00Z",
    }
    headers = {"WWW-Authenticate": TOKEN_EXPIRED_CHALLENGE}
    return json_response(body, status=401, headers=headers)


async def create_user(_request: web.Request) -> web.Response:
    """Always fails validation, in the FastAPI/pydantic v1 ``detail`` list shape."""
    detail = [
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
    return json_response({"detail": detail}, status=422)


async def search(_request: web.Request) -> web.Response:
    """Always rate limited, so agents can be shown how to honour Retry-After."""
    body = {"message": "Rate limit exceeded: 10 requests per second"}
    return json_response(body, status=429, headers={"Retry-After": "2"})


async def report(_request: web.Request) -> web.Response:
    """An HTML error page: the least agent-friendly failure there is."""
    return web.Response(
        body=REPORT_HTML.encode("utf-8"),
        status=500,
        content_type="text/html",
        charset="utf-8",
    )


async def status(_request: web.Request) -> web.Response:
    """Planned downtime with a retry hint."""
    body = {"error": "Service Unavailable", "message": "Maintenance in progress"}
    return json_response(body, status=503, headers={"Retry-After": "5"})


def blob_size(raw: str | None) -> int | None:
    """Parse ``?size=``: default when absent, capped, ``None`` when unusable."""
    if raw is None:
        return BLOB_DEFAULT_SIZE
    try:
        size = int(raw)
    except ValueError:
        return None
    if size < 0:
        return None
    return min(size, BLOB_MAX_SIZE)


async def blob(request: web.Request) -> web.StreamResponse:
    """Stream N bytes in fixed chunks, to exercise the gateway's streaming path.

    The body is never built in memory, so large sizes cost only one chunk.
    """
    size = blob_size(request.query.get("size"))
    if size is None:
        return json_response({"error": "size must be a non-negative integer"}, status=400)
    response = web.StreamResponse()
    response.content_type = "application/octet-stream"
    response.content_length = size
    await response.prepare(request)
    if request.method == "HEAD":
        # StreamResponse does not drop the body for HEAD; headers are the answer.
        return response
    try:
        await write_zeros(response, size)
    except ConnectionResetError:
        # The client (or gateway) hung up mid-stream: normal, not a server error.
        return response
    await response.write_eof()
    return response


async def write_zeros(response: web.StreamResponse, size: int) -> None:
    """Write ``size`` zero bytes in ``BLOB_CHUNK_SIZE`` pieces."""
    remaining = size
    while remaining > 0:
        chunk = _BLOB_CHUNK if remaining >= BLOB_CHUNK_SIZE else _BLOB_CHUNK[:remaining]
        await response.write(chunk)
        remaining -= len(chunk)


async def normalize_csv(request: web.Request) -> web.Response:
    """A data service that rejects ragged CSV with a human-only message, as many do."""
    text = (await request.text()).strip()
    rows = [line.split(",") for line in text.splitlines() if line.strip()]
    if not rows:
        return json_response({"error": "Empty CSV: expected a header row"}, status=400)
    expected = len(rows[0])
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != expected:
            message = f"Row at line {line} has {len(row)} columns, expected {expected}"
            return json_response({"error": message}, status=400)
    header = [name.strip() for name in rows[0]]
    records = [dict(zip(header, (v.strip() for v in row), strict=True)) for row in rows[1:]]
    return json_response({"rows": records})


def build_app() -> web.Application:
    """Assemble the demo routes; no state, so each call gives an independent app."""
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/items", list_items)
    app.router.add_get("/v1/items/{id}", get_item)
    app.router.add_delete("/v1/items/{id}", delete_item)
    app.router.add_post("/v1/orders", create_order)
    app.router.add_get("/v1/me", me)
    app.router.add_post("/v1/users", create_user)
    app.router.add_get("/v1/search", search)
    app.router.add_get("/v1/report", report)
    app.router.add_get("/v1/status", status)
    app.router.add_get("/v1/blob", blob)
    app.router.add_post("/v1/csv/normalize", normalize_csv)
    return app


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:9000`` allowed) for argparse."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> None:
    """CLI entry point: serve the demo API until interrupted."""
    parser = argparse.ArgumentParser(description="Demo legacy API for mendpoint.")
    parser.add_argument(
        "--listen",
        type=parse_listen,
        default=("127.0.0.1", 9000),
        metavar="HOST:PORT",
        help="address to listen on (default: 127.0.0.1:9000)",
    )
    args = parser.parse_args(argv)
    host, port = args.listen
    display_host = f"[{host}]" if ":" in host else host
    print(f"demo API listening on http://{display_host}:{port}", file=sys.stderr)
    web.run_app(build_app(), host=host, port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
