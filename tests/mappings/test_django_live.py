"""builtin:django against a running Django + DRF app, through a gateway with no config file."""

from __future__ import annotations

from gateway.config.loader import embedded_config
from tests.support.frameworks import FrameworkApp, live_failure
from tests.support.gateway import StartGateway


async def test_serializer_errors_name_the_field(
    start_gateway: StartGateway, django_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(django_app.url))
    failure = await live_failure(
        gateway, django_app, "POST", "/api/items/", json={"name": "", "quantity": "x"}
    )
    assert failure.status == 400
    assert failure.envelope["meta"]["rule"] == "django-drf-field-errors"
    assert failure.error["message"] == (
        "name: This field may not be blank.; quantity: A valid integer is required."
    )
    assert failure.error["fields"] == [
        {"field": "name", "message": "This field may not be blank."},
        {"field": "quantity", "message": "A valid integer is required."},
    ]
    taken = await live_failure(
        gateway, django_app, "POST", "/api/items/", json={"name": "taken", "quantity": 1}
    )
    assert taken.error["message"] == "An item with this name exists."


async def test_anonymous_403_is_auth_required_with_a_fix(
    start_gateway: StartGateway, django_app: FrameworkApp
) -> None:
    """DRF's default authentication answers 403; the defaults alone call that terminal."""
    gateway = await start_gateway(embedded_config(django_app.url))
    failure = await live_failure(gateway, django_app, "GET", "/api/private/")
    assert failure.status == 403
    assert failure.error["code"] == "AUTH_REQUIRED"
    assert failure.envelope["failure"]["category"] == "AUTH_REQUIRED"
    assert failure.envelope["meta"]["exit_code"] == 8
    assert failure.error["recoverable"] is True
    assert failure.error["fix_required"].startswith("Authenticate")
    token_scheme = await live_failure(gateway, django_app, "GET", "/api/admin/")
    assert (token_scheme.status, token_scheme.error["code"]) == (401, "AUTH_REQUIRED")


async def test_a_real_permission_refusal_stays_terminal(
    start_gateway: StartGateway, django_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(django_app.url))
    headers = {"Authorization": "Token good"}
    failure = await live_failure(gateway, django_app, "GET", "/api/admin/", headers=headers)
    assert failure.status == 403
    assert failure.error["code"] == "FORBIDDEN"
    assert failure.error["message"] == "You do not have permission to perform this action."
    assert failure.error["fix_required"] is None
    refused = await live_failure(
        gateway, django_app, "GET", "/api/admin/", headers={"Authorization": "Token bad"}
    )
    assert refused.error["code"] in {"AUTH_REQUIRED", "CREDENTIALS_INVALID"}


async def test_malformed_json_and_csrf(
    start_gateway: StartGateway, django_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(django_app.url))
    broken = await live_failure(
        gateway,
        django_app,
        "POST",
        "/api/items/",
        data=b"{",
        headers={"Content-Type": "application/json"},
    )
    assert broken.error["code"] == "MALFORMED_JSON"
    assert broken.error["message"].startswith("JSON parse error - ")
    csrf = await live_failure(gateway, django_app, "POST", "/form/", data=b"a=1")
    assert csrf.status == 403
    assert csrf.error["code"] == "CSRF_FAILED"
    assert csrf.error["fix_required"]


async def test_throttling_keeps_drfs_retry_after(
    start_gateway: StartGateway, django_app: FrameworkApp
) -> None:
    gateway = await start_gateway(embedded_config(django_app.url))
    failure = None
    for _ in range(3):  # the first call of the session may be allowed (1/min)
        response = await gateway.request(
            "GET", "/api/burst/", headers={"X-Error-Format": "envelope"}
        )
        if response.status == 429:
            failure = await response.json()
            break
    assert failure is not None
    assert failure["error"]["code"] == "RATE_LIMITED"
    assert failure["error"]["retryable"] is True
    assert 0 < failure["error"]["retry_after_ms"] <= 60_000
