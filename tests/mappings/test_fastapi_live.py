"""builtin:fastapi against a running FastAPI app, through a gateway with no config file."""

from __future__ import annotations

from gateway.config.loader import embedded_config
from tests.support.frameworks import FrameworkApp, live_failure
from tests.support.gateway import StartGateway


async def test_422_names_every_field_and_pydantics_message(
    start_gateway: StartGateway, fastapi_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(fastapi_app.url))
    failure = await live_failure(
        gateway, fastapi_app, "POST", "/orders", json={"name": 5, "quantity": 0}
    )
    assert failure.status == 422
    assert failure.envelope["meta"]["rule"] == "fastapi-422-fields"
    assert failure.error["code"] == "VALIDATION_FAILED"
    assert failure.error["message"] == (
        "body.name: Input should be a valid string; body.quantity: Input should be greater than 0"
    )
    assert failure.error["fields"] == [
        {"field": "body.name", "message": "Input should be a valid string"},
        {"field": "body.quantity", "message": "Input should be greater than 0"},
    ]
    assert failure.error["retryable"] is False
    address = {"city": "Oslo", "postcode": "1"}
    nested = await live_failure(
        gateway,
        fastapi_app,
        "POST",
        "/orders",
        json={"name": "x", "quantity": 1, "address": address},
    )
    assert nested.error["fields"] == [
        {"field": "body.address.postcode", "message": "String should match pattern '^\\d{5}$'"}
    ]


async def test_422_for_query_and_path_parameters(
    start_gateway: StartGateway, fastapi_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(fastapi_app.url))
    query = await live_failure(gateway, fastapi_app, "GET", "/search")
    assert query.error["message"] == "query.q: Field required"
    path = await live_failure(gateway, fastapi_app, "GET", "/orders/abc")
    assert path.error["message"].startswith("path.order_id: Input should be a valid integer")


async def test_malformed_json_and_a_body_that_is_not_an_object(
    start_gateway: StartGateway, fastapi_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(fastapi_app.url))
    headers = {"Content-Type": "application/json"}
    broken = await live_failure(gateway, fastapi_app, "POST", "/orders", data=b"{", headers=headers)
    assert broken.error["code"] == "MALFORMED_JSON"
    assert broken.error["fix_required"] == "Send a well-formed JSON body, then reissue the request"
    assert broken.error["message"] == (
        "The request body is not valid JSON: Expecting property name enclosed in double quotes"
    )
    scalar = await live_failure(gateway, fastapi_app, "POST", "/orders", json="x")
    assert scalar.envelope["meta"]["rule"] == "fastapi-422-fields"
    assert scalar.error["message"].startswith("body: Input should be a valid dictionary")


async def test_missing_credentials_are_auth_required_with_a_fix(
    start_gateway: StartGateway, fastapi_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(fastapi_app.url))
    failure = await live_failure(gateway, fastapi_app, "GET", "/me")
    assert failure.envelope["meta"]["rule"] == "fastapi-not-authenticated"
    assert failure.error["code"] == "AUTH_REQUIRED"
    assert failure.envelope["failure"]["category"] == "AUTH_REQUIRED"
    assert failure.error["fix_required"]


async def test_http_exception_detail_is_the_message(
    start_gateway: StartGateway, fastapi_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(fastapi_app.url))
    failure = await live_failure(gateway, fastapi_app, "GET", "/orders/5")
    assert (failure.error["code"], failure.error["message"]) == ("NOT_FOUND", "Order 5 not found")


async def test_additive_mode_keeps_fastapis_body_and_adds_the_message(
    start_gateway: StartGateway, fastapi_app: FrameworkApp
) -> None:
    """The default mode: FastAPI's own `detail` list survives, the failure fields are added."""
    gateway = await start_gateway(embedded_config(fastapi_app.url))
    response = await gateway.request("POST", "/orders", json={"name": "x", "quantity": 0})
    body = await response.json()
    assert response.status == 422
    assert body["detail"][0]["loc"] == ["body", "quantity"]
    assert body["error"]["message"] == "body.quantity: Input should be greater than 0"
    assert response.headers["X-Error-Code"] == "VALIDATION_FAILED"
