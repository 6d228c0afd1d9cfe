"""Falcon 4, on waitress: every error body here is Falcon's own.

Error shape: falcon/http_error.py, HTTPError.to_dict (`{"title", "description"}`), serialized
by the default error serializer (falcon/app_helpers.py, default_serialize_error); parameter
errors: falcon/errors.py (HTTPMissingParam, HTTPInvalidParam); malformed JSON:
falcon/media/json.py (`Invalid JSON`); 405 and 404 from the router (falcon/responders.py).
"""

import sys

import falcon
from waitress import serve

ITEMS = {"1": {"id": 1, "name": "apple"}}
ETAG = '"v1"'


class Items:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit = req.get_param_as_int("limit", required=True, min_value=1, max_value=100)
        resp.media = {"items": list(ITEMS.values())[:limit]}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.content_length and req.content_length > 1024:
            raise falcon.HTTPContentTooLarge(description="Item documents are limited to 1 KiB")
        body = req.get_media()
        name = body.get("name")
        if any(item["name"] == name for item in ITEMS.values()):
            raise falcon.HTTPConflict(description=f"An item named {name!r} already exists")
        resp.status = falcon.HTTP_201
        resp.media = {"id": 2, "name": name}


class Item:
    def on_get(self, req: falcon.Request, resp: falcon.Response, item_id: str) -> None:
        if item_id not in ITEMS:
            raise falcon.HTTPNotFound(description=f"No item with id {item_id}")
        resp.etag = ETAG
        resp.media = ITEMS[item_id]

    def on_put(self, req: falcon.Request, resp: falcon.Response, item_id: str) -> None:
        if req.if_match is None:
            raise falcon.HTTPPreconditionRequired(description="Send If-Match with the item's ETag")
        if all(tag.dumps() != ETAG for tag in req.if_match):
            raise falcon.HTTPPreconditionFailed(description="The item changed since it was read")
        resp.media = ITEMS[item_id]


class Admin:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.auth is None:
            raise falcon.HTTPUnauthorized(
                description="Send a bearer token", challenges=['Bearer realm="items"']
            )
        raise falcon.HTTPForbidden(description="This token may not read /admin")


class Export:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise falcon.HTTPServiceUnavailable(
            description="Exports are paused during the nightly backup", retry_after=120
        )


class Search:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise falcon.HTTPTooManyRequests(
            description="Search is limited to 10 calls a minute", retry_after=30
        )


class Crash:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise RuntimeError("boom")


app = falcon.App()
app.add_route("/items", Items())
app.add_route("/items/{item_id}", Item())
app.add_route("/admin", Admin())
app.add_route("/export", Export())
app.add_route("/search", Search())
app.add_route("/crash", Crash())

if __name__ == "__main__":
    serve(app, host="127.0.0.1", port=int(sys.argv[1]), _quiet=True)
