"""Pyramid, on waitress: every error body here is Pyramid's own.

Error shape: pyramid/httpexceptions.py, HTTPException.prepare: the exception renders itself
as JSON for a client that accepts JSON (`_json_formatter`: `{"message", "code", "title"}`, the
message being the explanation and the detail), as HTML or as plain text otherwise; the 404
for no route and the predicate mismatch are Pyramid's own (pyramid/router.py,
pyramid/exceptions.py PredicateMismatch).
"""

import sys

from pyramid.config import Configurator
from pyramid.httpexceptions import (
    HTTPBadRequest,
    HTTPConflict,
    HTTPForbidden,
    HTTPNotFound,
    HTTPPreconditionFailed,
    HTTPServiceUnavailable,
    HTTPTooManyRequests,
    HTTPUnauthorized,
)
from pyramid.request import Request
from waitress import serve

ITEMS = {"1": {"id": 1, "name": "apple"}}


def read_item(request: Request) -> dict[str, object]:
    item_id = request.matchdict["item_id"]
    if item_id not in ITEMS:
        raise HTTPNotFound(detail=f"Item {item_id} does not exist")
    return ITEMS[item_id]


def create_item(request: Request) -> dict[str, object]:
    try:
        body = request.json_body
    except ValueError as exc:
        raise HTTPBadRequest(detail=f"The body is not JSON: {exc}") from exc
    if "name" not in body:
        raise HTTPBadRequest(detail="The 'name' field is required")
    if any(item["name"] == body["name"] for item in ITEMS.values()):
        raise HTTPConflict(detail=f"An item named '{body['name']}' already exists")
    return {"id": 2, "name": body["name"]}


def update_item(request: Request) -> dict[str, object]:
    if request.if_match.etags and '"v1"' not in str(request.if_match):
        raise HTTPPreconditionFailed(detail="The item has changed; read it again for its ETag")
    return ITEMS["1"]


def admin(request: Request) -> None:
    if not request.authorization:
        raise HTTPUnauthorized(detail="Log in with a bearer token")
    raise HTTPForbidden(detail="Only administrators may read /admin")


def reports(request: Request) -> None:
    raise HTTPServiceUnavailable(detail="Reports are being rebuilt; try again in a minute")


def search(request: Request) -> None:
    raise HTTPTooManyRequests(detail="Search allows 5 requests a minute")


def crash(request: Request) -> None:
    raise RuntimeError("boom")


if __name__ == "__main__":
    with Configurator() as config:
        config.add_route("item", "/items/{item_id}")
        config.add_route("items", "/items")
        config.add_route("admin", "/admin")
        config.add_route("reports", "/reports")
        config.add_route("search", "/search")
        config.add_route("crash", "/crash")
        config.add_view(read_item, route_name="item", request_method="GET", renderer="json")
        config.add_view(update_item, route_name="item", request_method="PUT", renderer="json")
        config.add_view(create_item, route_name="items", request_method="POST", renderer="json")
        config.add_view(admin, route_name="admin", renderer="json")
        config.add_view(reports, route_name="reports", renderer="json")
        config.add_view(search, route_name="search", renderer="json")
        config.add_view(crash, route_name="crash", renderer="json")
        app = config.make_wsgi_app()
    serve(app, host="127.0.0.1", port=int(sys.argv[1]), _quiet=True)
