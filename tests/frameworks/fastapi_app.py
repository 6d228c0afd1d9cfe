"""A FastAPI app that fails the way FastAPI apps do, for the fastapi pack's live tests.

`python fastapi_app.py PORT` serves it with uvicorn on 127.0.0.1:PORT. Every error body here
is FastAPI's or Starlette's own: request validation (422 with `detail[].loc/msg`),
`HTTPException` with a string detail and headers, the router's 404 and 405.
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel, Field

app = FastAPI()


class Address(BaseModel):
    city: str
    postcode: str = Field(pattern=r"^\d{5}$")


class Order(BaseModel):
    name: str
    quantity: int = Field(gt=0)
    address: Address | None = None


@app.post("/orders")
def create_order(order: Order) -> Order:
    return order


@app.get("/orders/{order_id}")
def get_order(order_id: int) -> dict[str, int]:
    raise HTTPException(status_code=404, detail=f"Order {order_id} not found")


@app.get("/me")
def me(authorization: str | None = Header(default=None)) -> dict[str, str]:
    if authorization is None:
        raise HTTPException(
            status_code=401, detail="Not authenticated", headers={"WWW-Authenticate": "Bearer"}
        )
    return {"user": "someone"}


@app.get("/search")
def search(q: str) -> dict[str, str]:
    raise HTTPException(status_code=429, detail="Too many searches", headers={"Retry-After": "3"})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
