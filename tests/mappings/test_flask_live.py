"""builtin:flask against a running Flask app, through a gateway with no config file."""

from __future__ import annotations

from gateway.config.loader import embedded_config
from tests.support.frameworks import FrameworkApp, live_failure
from tests.support.gateway import StartGateway


async def test_abort_description_is_the_message(
    start_gateway: StartGateway, flask_app: FrameworkApp
) -> None:
    """Werkzeug escapes the description into its HTML page; the message has it back."""
    gateway = await start_gateway(embedded_config(flask_app.url))
    failure = await live_failure(gateway, flask_app, "POST", "/orders", json={})
    assert failure.status == 400
    assert b"Missing &#39;name&#39;" in failure.direct_body
    assert failure.error["code"] == "BAD_REQUEST"
    assert failure.error["message"] == "Bad Request: Missing 'name' in the request body"
    assert failure.error["fix_required"]


async def test_get_json_without_a_json_content_type_says_how_to_fix_it(
    start_gateway: StartGateway, flask_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(flask_app.url))
    failure = await live_failure(gateway, flask_app, "POST", "/orders", data=b"x")
    assert failure.status == 415
    assert failure.envelope["meta"]["rule"] == "flask-json-content-type"
    assert failure.error["fix_required"] == (
        "Send the body as JSON with Content-Type: application/json, then reissue"
    )
    assert "'application/json'" in failure.error["message"]


async def test_werkzeug_pages_keep_their_status_classes(
    start_gateway: StartGateway, flask_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(flask_app.url))
    cases = {
        ("GET", "/private"): ("AUTH_REQUIRED", "Unauthorized: The server could not verify"),
        ("GET", "/admin"): ("FORBIDDEN", "Forbidden: You don't have the permission"),
        ("GET", "/nope"): ("NOT_FOUND", "Not Found: The requested URL was not found"),
        ("DELETE", "/orders"): ("METHOD_NOT_ALLOWED", "Method Not Allowed: The method is"),
    }
    for (method, path), (code, message) in cases.items():
        failure = await live_failure(gateway, flask_app, method, path)
        assert failure.error["code"] == code, path
        assert failure.error["message"].startswith(message), failure.error["message"]


async def test_rate_limit_and_oversized_body(
    start_gateway: StartGateway, flask_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(flask_app.url))
    limited = await live_failure(gateway, flask_app, "GET", "/search")
    assert (limited.error["code"], limited.error["retry_after_ms"]) == ("RATE_LIMITED", 7000)
    assert limited.error["message"] == "Too Many Requests: Slow down: 5 searches per minute"
    big = await live_failure(gateway, flask_app, "POST", "/upload", data=b"x" * 4096)
    assert big.error["code"] == "PAYLOAD_TOO_LARGE"


async def test_a_crash_page_gives_no_traceback(
    start_gateway: StartGateway, flask_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(flask_app.url))
    failure = await live_failure(gateway, flask_app, "GET", "/crash")
    assert failure.error["code"] == "UPSTREAM_INTERNAL_ERROR"
    assert "password" not in failure.error["message"]
    assert failure.error["message"].startswith("Internal Server Error")


async def test_a_browser_still_gets_werkzeugs_page(
    start_gateway: StartGateway, flask_app: FrameworkApp
) -> None:
    """Additive mode, Accept: text/html: the page's bytes, only the advisory headers added."""
    gateway = await start_gateway(embedded_config(flask_app.url))
    response = await gateway.request("POST", "/orders", json={}, headers={"Accept": "text/html"})
    assert response.status == 400
    assert b"<h1>Bad Request</h1>" in await response.read()
    assert response.headers["X-Error-Code"] == "BAD_REQUEST"
