"""A FastAPI orders API whose OpenAPI document describes its errors, for `mendpoint init`.

`python orders_api.py PORT` serves it with uvicorn on 127.0.0.1:PORT.
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel


class Order(BaseModel):
    sku: str
    qty: int


class Problem(BaseModel):
    detail: str


app = FastAPI(title="Orders", version="1.4.0")
LOCKED = {7}


@app.post(
    "/orders",
    operation_id="createOrder",
    status_code=201,
    responses={
        409: {
            "model": Problem,
            "description": "Order already exists",
            "content": {"application/json": {"example": {"detail": "Order dup-1 already exists"}}},
        },
        402: {"model": Problem, "description": "Card declined by the issuer"},
        503: {"model": Problem, "description": "Payment processor offline"},
    },
)
def create_order(order: Order) -> dict[str, object]:
    if order.sku.startswith("dup"):
        raise HTTPException(409, f"Order {order.sku} already exists")
    if order.sku == "broke":
        raise HTTPException(402, "Card declined")
    return {"id": 1, "sku": order.sku}


@app.get(
    "/orders/{order_id}",
    operation_id="getOrder",
    responses={
        404: {"model": Problem, "description": "Not Found"},
        423: {"model": Problem, "description": "Order is locked for review"},
    },
)
def get_order(order_id: int) -> dict[str, object]:
    if order_id in LOCKED:
        raise HTTPException(423, f"Order {order_id} is locked")
    if order_id > 100:
        raise HTTPException(404, "Not Found")
    return {"id": order_id}


@app.get(
    "/stock/{sku}",
    operation_id="getStock",
    responses={503: {"model": Problem, "description": "Inventory service warming up"}},
)
def get_stock(sku: str) -> dict[str, object]:
    if sku == "cold":
        raise HTTPException(503, "warming up", headers={"Retry-After": "2"})
    return {"sku": sku, "count": 3}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
