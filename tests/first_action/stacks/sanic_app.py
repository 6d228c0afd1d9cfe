"""Sanic, its own server: every error body here is Sanic's own.

Error shape: sanic/errorpages.py, JSONRenderer (`{"description", "status", "message"}`; chosen
for a client that accepts JSON, FALLBACK_ERROR_FORMAT auto); exceptions: sanic/exceptions.py;
the response timeout: sanic/server/protocols/http_protocol.py (503 "Response Timeout");
the body limit: sanic/http/http1.py (413 "Request body exceeds the size limit"); malformed
JSON: sanic/request/types.py ("Failed when parsing body as json").
"""

import asyncio
import sys

from sanic import Sanic
from sanic.exceptions import Forbidden, NotFound, SanicException, Unauthorized
from sanic.request import Request
from sanic.response import HTTPResponse, json

app = Sanic("corpus", configure_logging=False)
app.config.RESPONSE_TIMEOUT = 1
app.config.REQUEST_MAX_SIZE = 2048
ITEMS = {1: {"id": 1, "name": "apple"}}


@app.get("/items/<item_id:int>")
async def read_item(request: Request, item_id: int) -> HTTPResponse:
    if item_id not in ITEMS:
        raise NotFound(f"Item {item_id} does not exist")
    return json(ITEMS[item_id])


@app.post("/items")
async def create_item(request: Request) -> HTTPResponse:
    name = (request.json or {}).get("name")
    if not name:
        raise SanicException("The field 'name' is required", status_code=422)
    if any(item["name"] == name for item in ITEMS.values()):
        raise SanicException(f"An item named '{name}' already exists", status_code=409)
    return json({"id": 2, "name": name}, status=201)


@app.get("/admin")
async def admin(request: Request) -> HTTPResponse:
    if not request.token:
        raise Unauthorized("A token is required to read /admin", scheme="Bearer")
    raise Forbidden("This token may not read /admin")


@app.get("/slow")
async def slow(request: Request) -> HTTPResponse:
    await asyncio.sleep(5)
    return json({"done": True})


@app.get("/crash")
async def crash(request: Request) -> HTTPResponse:
    raise RuntimeError("boom")


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(sys.argv[1]), single_process=True, access_log=False)
