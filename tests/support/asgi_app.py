"""A tiny Starlette app served by a real uvicorn (tests/support/upstreams.py).

It behaves as many production APIs do when a handler crashes: Starlette's error middleware
answers 500 *without* `Connection: close`, then uvicorn closes the connection a few
milliseconds later. `/seen` tells how many requests of each kind reached the app, so a test
can prove that each client request reached it exactly once.
"""

from __future__ import annotations

from collections import Counter

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SEEN: Counter[str] = Counter()


async def boom(request: Request) -> Response:
    SEEN["boom"] += 1
    raise RuntimeError("an unhandled exception, as in production")


async def item(request: Request) -> Response:
    SEEN[request.method] += 1
    if request.method == "POST":
        body = await request.body()
        return JSONResponse({"created": len(body)}, status_code=201)
    return JSONResponse({"id": request.path_params["item_id"]})


async def seen(request: Request) -> Response:
    return JSONResponse(dict(SEEN))


app = Starlette(
    routes=[
        Route("/boom", boom),
        Route("/items/{item_id}", item, methods=["GET", "POST"]),
        Route("/seen", seen),
    ]
)
