"""Bottle, on its own WSGI reference server: every error page here is Bottle's own.

Error pages: bottle.py, ERROR_PAGE_TEMPLATE (an HTML page whose <pre> holds the HTTPError's
body); abort() and HTTPError; 405 from the router (Router.match, "Method not allowed.");
request.json: "Invalid JSON" (400) and, past BaseRequest.MEMFILE_MAX, "Request entity too
large" (413).
"""

import sys

import bottle
from bottle import BaseRequest, abort, request, route, run

BaseRequest.MEMFILE_MAX = 1024
ITEMS = {1: {"id": 1, "name": "apple"}}


@route("/items/<item_id:int>")
def read_item(item_id: int) -> dict[str, object]:
    if item_id not in ITEMS:
        abort(404, f"Item {item_id} is not in the catalogue")
    return ITEMS[item_id]


@route("/items", method="POST")
def create_item() -> dict[str, object]:
    body = request.json
    if not isinstance(body, dict) or "name" not in body:
        abort(400, "A JSON object with a 'name' is required")
    if any(item["name"] == body["name"] for item in ITEMS.values()):
        abort(409, f"An item named '{body['name']}' already exists")
    return {"id": 2, "name": body["name"]}


@route("/crash")
def crash() -> None:
    raise RuntimeError("boom")


if __name__ == "__main__":
    bottle.debug(False)
    run(host="127.0.0.1", port=int(sys.argv[1]), quiet=True)
