"""builtin:express against running Express apps (development and production), through a
gateway with no config file."""

from __future__ import annotations

import json

from gateway.config.loader import embedded_config
from tests.support.frameworks import FrameworkApp, live_failure
from tests.support.gateway import StartGateway


async def test_express_validator_names_every_field(
    start_gateway: StartGateway, express_apps: dict[str, FrameworkApp]
) -> None:
    app = express_apps["production"]
    gateway = await start_gateway(embedded_config(app.url))
    failure = await live_failure(gateway, app, "POST", "/orders", json={"quantity": 0})
    assert failure.status == 400
    assert failure.envelope["meta"]["rule"] == "express-validator-fields"
    assert failure.error["fields"] == [
        {"field": "name", "message": "Invalid value"},
        {"field": "name", "message": "name is required"},
        {"field": "quantity", "message": "quantity must be a positive integer"},
    ]
    assert failure.error["message"] == (
        "name: Invalid value; name: name is required; quantity: quantity must be a positive integer"
    )


async def test_unmatched_route_in_both_environments(
    start_gateway: StartGateway, express_apps: dict[str, FrameworkApp]
) -> None:
    for app in express_apps.values():
        gateway = await start_gateway(embedded_config(app.url))
        failure = await live_failure(gateway, app, "DELETE", "/orders")
        assert failure.status == 404
        assert failure.error["code"] == "ROUTE_NOT_FOUND"
        assert failure.error["message"] == "Cannot DELETE /orders"
        assert failure.error["suggestion"]


async def test_malformed_json_in_development(
    start_gateway: StartGateway, express_apps: dict[str, FrameworkApp]
) -> None:
    app = express_apps["development"]
    gateway = await start_gateway(embedded_config(app.url))
    headers = {"Content-Type": "application/json"}
    failure = await live_failure(gateway, app, "POST", "/orders", data=b"{", headers=headers)
    assert failure.error["code"] == "MALFORMED_JSON"
    assert failure.error["message"].startswith("SyntaxError: ")
    assert "node_modules" not in failure.error["message"]
    assert "at JSON.parse" not in failure.error["message"]


async def test_next_err_message_without_the_stack(
    start_gateway: StartGateway, express_apps: dict[str, FrameworkApp]
) -> None:
    """An error with a status passed to next(): development shows its message, unescaped."""
    dev, prod = express_apps["development"], express_apps["production"]
    gateway = await start_gateway(embedded_config(dev.url))
    failure = await live_failure(gateway, dev, "GET", "/orders/7")
    assert (failure.status, failure.error["code"]) == (409, "CONFLICT")
    assert failure.error["message"] == 'Error: Order "7" can\'t be read'
    gateway = await start_gateway(embedded_config(prod.url))
    failure = await live_failure(gateway, prod, "GET", "/orders/7")
    assert failure.error["message"] == "Conflict"


async def test_a_development_500_keeps_its_secrets_out_of_the_message(
    start_gateway: StartGateway, express_apps: dict[str, FrameworkApp]
) -> None:
    app = express_apps["development"]
    gateway = await start_gateway(embedded_config(app.url))
    failure = await live_failure(gateway, app, "GET", "/crash")
    assert b"password=hunter2" in failure.direct_body
    assert failure.envelope["meta"]["rule"] == "express-stack-trace-500"
    assert "hunter2" not in failure.error["message"]
    assert "10.0.0.5" not in failure.error["message"]
    assert "hunter2" not in json.dumps(failure.envelope)  # nor in meta.original: redacted


async def test_oversized_body(
    start_gateway: StartGateway, express_apps: dict[str, FrameworkApp]
) -> None:
    app = express_apps["development"]
    gateway = await start_gateway(embedded_config(app.url))
    failure = await live_failure(
        gateway, app, "POST", "/orders", json={"name": "x" * 4096, "quantity": 1}
    )
    assert (failure.status, failure.error["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert failure.error["message"] == "PayloadTooLargeError: request entity too large"
