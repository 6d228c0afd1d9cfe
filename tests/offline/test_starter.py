"""`mendpoint init`'s starter: rules from a real FastAPI OpenAPI document, safe by construction."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from gateway.cli import main
from gateway.config.loader import builtin_names, load_config
from gateway.config.route_model import RouteSpec
from gateway.exchange.routes import Route
from gateway.failure import Category
from gateway.offline.openapi import OpenApiError, load, parse
from gateway.offline.starter import (
    TOKEN_FILE,
    build,
    category_for,
    says_more_than_status,
    upper_snake,
)
from tests.frameworks.orders_api import app as orders_app
from tests.support.frameworks import FrameworkApp, python_app, running
from tests.support.gateway import StartGateway, StartUpstream
from tests.support.paths import FRAMEWORKS
from tests.support.secrets import write_secret

DATA = Path(__file__).parent / "data"


def document() -> dict[str, Any]:
    """FastAPI's own OpenAPI document for the orders API (generated, not hand-written)."""
    doc: dict[str, Any] = orders_app.openapi()
    return doc


def written(tmp_path: Path, config: str) -> Path:
    """A starter's config written as init writes it: with its admin token file beside it."""
    write_secret(tmp_path / TOKEN_FILE, "0123456789abcdef" * 4 + "\n")
    path = tmp_path / "mendpoint.yaml"
    path.write_text(config)
    return path


def write_starter(tmp_path: Path, doc: dict[str, Any]) -> Path:
    starter = build("http://127.0.0.1:9", parse(doc), "openapi.json", None, builtin_names())
    return written(tmp_path, starter.config)


def test_documented_errors_become_rules_with_codes_categories_and_operations(
    tmp_path: Path,
) -> None:
    loaded = load_config(str(write_starter(tmp_path, document())))
    rules = {r.id: r for r in loaded.config.rules}
    assert rules["createOrder-409"].error.code == "ORDER_ALREADY_EXISTS"
    assert rules["createOrder-409"].error.category is Category.CONFLICT
    assert rules["createOrder-409"].match.methods == ["POST"]
    assert rules["createOrder-409"].match.path == "/orders"
    assert rules["createOrder-402"].error.code == "CARD_DECLINED_BY_THE_ISSUER"
    # Categories agree with the shipped fallback for the status (402: PERMISSION_DENIED).
    assert rules["createOrder-402"].error.category is Category.PERMISSION_DENIED
    assert rules["getOrder-423"].error.code == "ORDER_IS_LOCKED_FOR_REVIEW"
    assert rules["getOrder-423"].match.path == "/orders/*"
    # GET is idempotent: a 503 there is transient and retryable after Retry-After.
    stock = rules["getStock-503"].error
    assert stock.retryable and stock.category is Category.UNAVAILABLE
    route = loaded.config.routes[0]
    names = {(op.method, op.path): op.name for op in route.operations}
    assert names[("POST", "/orders")] == "createOrder"
    assert names[("GET", "/orders/{order_id}")] == "getOrder"


def test_nothing_unsafe_by_construction(tmp_path: Path) -> None:
    """No retryable rule on a non-idempotent method; no fix_command anywhere."""
    text = write_starter(tmp_path, document()).read_text()
    loaded = load_config(str(tmp_path / "mendpoint.yaml"))
    for rule in loaded.config.rules:
        assert rule.error.fix_command is None
        if rule.error.retryable:
            assert set(rule.match.methods or []) <= set(
                RouteSpec.model_fields["idempotent_methods"].get_default(call_default_factory=True)
            )
    assert "createOrder-503" not in {r.id for r in loaded.config.rules}
    assert "POST /orders → 503: left to the shipped rules" in text
    # Statuses described only by their reason phrase make no rule.
    assert "getOrder-404" not in text and "getOrder-422" not in text
    assert "review:" in text


def test_examples_become_fixtures(tmp_path: Path) -> None:
    starter = build("http://127.0.0.1:9", parse(document()), "x", None, builtin_names())
    cases = {c["name"]: c for c in starter.fixtures}
    example = cases["createOrder-409-example-1"]
    assert example["response"]["json"] == {"detail": "Order dup-1 already exists"}
    assert example["expect"]["code"] == "ORDER_ALREADY_EXISTS"
    assert cases["getOrder-423-no-example"]["request"] == {"method": "GET", "path": "/orders/1"}


def test_an_error_code_in_the_example_wins_over_the_description() -> None:
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/pay": {
                "post": {
                    "operationId": "pay",
                    "responses": {
                        "402": {
                            "description": "Payment failed",
                            "content": {
                                "application/json": {
                                    "examples": {
                                        "declined": {"value": {"error": {"code": "card_declined"}}}
                                    }
                                }
                            },
                        }
                    },
                }
            }
        },
    }
    starter = build("http://127.0.0.1:9", parse(doc), "x", None, [])
    assert [r.code for r in starter.rules] == ["CARD_DECLINED"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Order already exists", "ORDER_ALREADY_EXISTS"),
        ("orderAlreadyExists", "ORDER_ALREADY_EXISTS"),
        ("The quota (per day) is exhausted!", "THE_QUOTA_PER_DAY_IS_EXHAUSTED"),
        ("409 conflict", "E_409_CONFLICT"),
        # Whole words, never cut inside one (six words gave AN_ACCOUNT_WITH_THIS_EMAIL_ALREADY).
        (
            "An account with this email already exists.",
            "AN_ACCOUNT_WITH_THIS_EMAIL_ALREADY_EXISTS",
        ),
        (
            "The requested resource could not be found on this server because reasons",
            "THE_REQUESTED_RESOURCE_COULD_NOT_BE_FOUND_ON",
        ),
    ],
)
def test_upper_snake(text: str, expected: str) -> None:
    assert upper_snake(text) == expected


@pytest.mark.parametrize(
    ("description", "status", "more"),
    [
        ("Not Found", 404, False),
        ("Validation Error", 422, False),
        ("Error", 500, False),
        ("Bad Request", 400, False),
        ("Order already exists", 409, True),
        ("Rate limit of 100 per minute exceeded", 429, True),
    ],
)
def test_says_more_than_status(description: str, status: int, more: bool) -> None:
    assert says_more_than_status(description, status) is more


def test_categories_follow_the_status() -> None:
    assert category_for(422) is Category.VALIDATION_ERROR
    assert category_for(429) is Category.RATE_LIMITED
    assert category_for(402) is Category.PERMISSION_DENIED
    assert category_for(499) is Category.VALIDATION_ERROR
    assert category_for(507) is Category.UPSTREAM_ERROR


def test_operations_name_then_retry_per_method_and_template() -> None:
    spec = RouteSpec.model_validate(
        {
            "name": "api",
            "upstream": "http://127.0.0.1:9",
            "operation": "fallback.op",
            "operations": [
                {"method": "GET", "path": "/orders/{id}", "name": "getOrder"},
                {"method": "POST", "path": "/orders", "name": "createOrder"},
            ],
        }
    )
    route = Route.build(spec)
    assert route.operation_for("GET", "/orders/42") == "getOrder"
    assert route.operation_for("POST", "/orders") == "createOrder"
    assert route.operation_for("GET", "/orders/42/items") == "fallback.op"
    assert route.operation_for("GET", "/orders/") == "fallback.op"


def test_documents_that_are_not_openapi_3_are_refused(tmp_path: Path) -> None:
    swagger = tmp_path / "swagger.yaml"
    swagger.write_text(yaml.safe_dump({"swagger": "2.0", "paths": {}}))
    with pytest.raises(OpenApiError, match=r"not an OpenAPI 3\.x document"):
        load(str(swagger))
    with pytest.raises(OpenApiError, match="cannot read"):
        load(str(tmp_path / "missing.json"))


@pytest.fixture(scope="module")
def orders_api() -> Iterator[FrameworkApp]:
    with running(python_app("orders_api.py"), ("orders",)) as [app]:
        yield app


async def test_init_then_check_then_serve_gives_specific_codes(
    orders_api: FrameworkApp,
    tmp_path: Path,
    start_gateway: StartGateway,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """From only the URL of a real FastAPI app: its /openapi.json is found, the probe sees
    Starlette, `check` and `test` pass on what init wrote, and the gateway names the
    documented errors, in `headers` mode: the upstream's bodies untouched."""
    out = tmp_path / "mendpoint.yaml"
    argv = ["init", "--upstream", orders_api.url, "--out", str(out)]
    assert await asyncio.to_thread(main, argv) == 0
    said = capsys.readouterr().out
    assert "packs: fastapi" in said
    assert await asyncio.to_thread(main, ["check", "--config", str(out)]) == 0
    fixtures = tmp_path / "mendpoint.fixtures.yaml"
    assert await asyncio.to_thread(main, ["test", "--config", str(out), str(fixtures)]) == 0
    assert "/openapi.json)" in out.read_text()

    gateway = await start_gateway(load_config(str(out)))
    dup = await gateway.request("POST", "/orders", json={"sku": "dup-9", "qty": 1})
    assert dup.status == 409
    assert dup.headers["X-Error-Code"] == "ORDER_ALREADY_EXISTS"
    assert await dup.json() == {"detail": "Order dup-9 already exists"}  # headers: untouched
    locked = await gateway.request("GET", "/orders/7")
    assert locked.headers["X-Error-Code"] == "ORDER_IS_LOCKED_FOR_REVIEW"
    cold = await gateway.request("GET", "/stock/cold")
    assert cold.headers["X-Error-Code"] == "INVENTORY_SERVICE_WARMING_UP"
    assert cold.headers["X-Error-Retryable"] == "true"
    # An undocumented error still gets the shipped pack's answer.
    invalid = await gateway.request("POST", "/orders", json={"sku": 3})
    assert invalid.status == 422
    assert invalid.headers["X-Error-Code"] != "ORDER_ALREADY_EXISTS"


def test_init_starts_the_retrofit_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`headers` mode, capture of what only a fallback names, the admin listener on loopback
    with a token file written 0600 beside the config (kept when init runs again), the
    console's drafts file written and included (kept too: it holds saved rules), and a
    config `check` accepts as it is."""
    out = tmp_path / "mendpoint.yaml"
    argv = ["init", "--upstream", "http://127.0.0.1:9", "--out", str(out)]
    assert main(argv) == 0
    written = yaml.safe_load(out.read_text())
    (route,) = written["routes"]
    assert route["mode"] == "headers"
    assert route["capture"] == {"dir": str(tmp_path / "captures"), "only": "unmatched"}
    assert written["admin"] == "127.0.0.1:8491"
    assert written["admin_token_file"] == "mendpoint-admin-token"
    assert written["console"] == {"drafts_file": "console-drafts.yaml"}
    assert written["include"] == ["console-drafts.yaml"]
    drafts = tmp_path / "console-drafts.yaml"
    assert yaml.safe_load(drafts.read_text()) == {"rules": []}
    token = tmp_path / "mendpoint-admin-token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text().strip()) == 64
    assert "wrote " + str(token) in capsys.readouterr().out
    first = token.read_text()
    saved = "rules: []\nroute_modes: {api: additive}\n"
    drafts.write_text(saved)
    assert main([*argv, "--force"]) == 0
    assert token.read_text() == first  # its clients have it: kept
    assert drafts.read_text() == saved  # what the console saved: kept
    said = capsys.readouterr().out
    assert f"kept {token}" in said and f"kept {drafts}" in said
    assert main(["check", "--config", str(out)]) == 0


def test_init_refuses_to_overwrite_and_reports_a_bad_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mendpoint.yaml"
    out.write_text("keep me\n")
    assert main(["init", "--upstream", "http://127.0.0.1:9", "--out", str(out)]) != 0
    assert out.read_text() == "keep me\n"
    assert "--force" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"swagger": "2.0"}')
    argv = [
        "init",
        "--upstream",
        "http://127.0.0.1:9",
        "--openapi",
        str(bad),
        "--out",
        str(tmp_path / "x.yaml"),
        "--force",
    ]
    assert main(argv) != 0
    assert "not an OpenAPI 3.x document" in capsys.readouterr().err


def test_a_drf_spectacular_document(tmp_path: Path) -> None:
    """drf-spectacular's own output for a DRF view (tests/frameworks/drf_schema.py)."""
    script = FRAMEWORKS / "drf_schema.py"
    generated = subprocess.run(
        [sys.executable, str(script)], capture_output=True, check=True, timeout=60
    ).stdout
    doc = json.loads(generated)
    starter = build("http://127.0.0.1:9", parse(doc), "drf", None, builtin_names())
    loaded = load_config(str(written(tmp_path, starter.config)))
    (rule,) = loaded.config.rules
    assert rule.error.code == "ORDER_OPEN"  # the example's own code field
    assert rule.match.path == "/orders/"
    assert rule.match.methods == ["POST"]
    assert [(j.path, j.regex) for j in rule.match.json_conditions] == [("code", "^order_open$")]
    names = {op.name for op in loaded.config.routes[0].operations}
    assert names == {"orders_create"}


@pytest.mark.parametrize(
    ("name", "rules", "operations"),
    [
        # Only `default` error responses: nothing says more than a status.
        ("petstore.yaml", set(), {"listPets", "createPets", "showPetById"}),
        # 402 states its code in an example ($ref'd); 429 on POST is left to the shipped rule.
        (
            "payments.json",
            {"PostCharges-402", "GetChargesCharge-429"},
            {"PostCharges", "GetChargesCharge"},
        ),
    ],
)
def test_public_style_documents(
    tmp_path: Path, name: str, rules: set[str], operations: set[str]
) -> None:
    doc = load(str(DATA / name))
    starter = build("http://127.0.0.1:9", doc, name, None, builtin_names())
    loaded = load_config(str(written(tmp_path, starter.config)))
    assert {r.id for r in loaded.config.rules} == rules
    assert {op.name for op in loaded.config.routes[0].operations} == operations
    for rule in loaded.config.rules:
        if rule.error.retryable:
            assert rule.match.methods == ["GET"]


@pytest.mark.parametrize(
    "where",
    # Litestar's OpenAPIController, Django Ninja at api/, Swashbuckle, Quarkus, swaggo.
    ["/schema/openapi.json", "/api/openapi.json", "/swagger/v1/swagger.json", "/q/openapi"],
)
async def test_init_finds_the_document_where_other_frameworks_serve_it(
    where: str,
    tmp_path: Path,
    start_upstream: StartUpstream,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Served only at another framework's default path, the document is still found and its
    documented errors become rules (the issue: Litestar's `/schema/openapi.json` was missed)."""
    doc = document()

    async def serve_document(request: web.Request) -> web.Response:
        return web.json_response(doc)

    app = web.Application()
    app.router.add_get(where, serve_document)
    upstream = await start_upstream(app)
    out = tmp_path / "mendpoint.yaml"
    argv = ["init", "--upstream", upstream, "--out", str(out)]
    assert await asyncio.to_thread(main, argv) == 0
    assert "0 rule(s)" not in capsys.readouterr().out
    assert f"{where})" in out.read_text()
    assert "ORDER_ALREADY_EXISTS" in out.read_text()
