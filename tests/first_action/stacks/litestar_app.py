"""Litestar, on uvicorn: every error body here is Litestar's own.

Error shape: litestar/exceptions/responses/__init__.py, ExceptionResponseContent
(`{"status_code", "detail", "extra"}`); validation: litestar/_signature/model.py
(`Validation failed for METHOD PATH` with `extra: [{"message", "key", "source"}]`); rate
limiting: litestar/middleware/rate_limit.py (429 with RateLimit-* headers); body size:
`request_max_body_size` (413, litestar/connection/request.py).
"""

import sys
from dataclasses import dataclass

import uvicorn
from litestar import Litestar, get, post, put
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ServiceUnavailableException,
)
from litestar.middleware.rate_limit import RateLimitConfig

ITEMS = {1: {"id": 1, "name": "apple", "qty": 3}}


@dataclass
class Item:
    name: str
    qty: int


@get("/items/{item_id:int}")
async def read_item(item_id: int) -> dict[str, object]:
    if item_id not in ITEMS:
        raise NotFoundException(detail=f"Item {item_id} not found")
    return ITEMS[item_id]


@post("/items")
async def create_item(data: Item) -> dict[str, object]:
    if any(item["name"] == data.name for item in ITEMS.values()):
        raise HTTPException(status_code=409, detail=f"An item named '{data.name}' already exists")
    return {"id": 2, "name": data.name, "qty": data.qty}


@put("/items/{item_id:int}")
async def replace_item(item_id: int, data: Item) -> dict[str, object]:
    return {"id": item_id, "name": data.name, "qty": data.qty}


@get("/admin")
async def admin(headers: dict[str, str]) -> dict[str, str]:
    if "authorization" not in headers:
        raise NotAuthorizedException(detail="A bearer token is required")
    raise PermissionDeniedException(detail="Only administrators may read /admin")


@get("/reports")
async def reports() -> None:
    raise ServiceUnavailableException(detail="Report generation is paused for maintenance")


@get("/crash")
async def crash() -> None:
    raise RuntimeError("boom")


@get("/limited")
async def limited() -> dict[str, str]:
    return {"ok": "yes"}


app = Litestar(
    route_handlers=[read_item, create_item, replace_item, admin, reports, crash, limited],
    middleware=[
        RateLimitConfig(
            rate_limit=("minute", 2), exclude=["/items", "/admin", "/reports", "/crash"]
        ).middleware
    ],
    request_max_body_size=1024,
)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
