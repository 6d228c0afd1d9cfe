"""The templates of a rule's `error`: `message`, `fix_required` and `suggestion` are filled
from the same captures, and `check` refuses what could not be filled (a placeholder no
capture provides, a lone brace, a conversion or format spec) instead of the step falling
open on the first failure it matches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.classify import Classifier, Observation, ObservationKind
from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from tests.support.gateway import StartUpstream, start_process, stop_process, wait_ready
from tests.support.ports import free_port

LOCKED: dict[str, Any] = {
    "id": "order-locked",
    "match": {"status": [409], "json": {"path": "order", "regex": "^(?P<order>\\d+)$"}},
    "error": {
        "code": "ORDER_LOCKED",
        "category": "CONFLICT",
        "message": "order {order} is locked",
        "fix_required": "Wait until order {order} is unlocked",
        "suggestion": "Ask who holds order {order}; {{braces}} stay literal ({method} {path})",
    },
}


def config_with(rule: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "routes": [{"name": "shop", "upstream": "http://127.0.0.1:9", "mode": "envelope"}],
        "rules": [rule],
        **extra,
    }


def problems(tmp_path: Path, **error: Any) -> list[str]:
    rule = {**LOCKED, "error": {**LOCKED["error"], **error}}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config_with(rule)))
    with pytest.raises(ConfigError) as raised:
        load_config(str(path))
    return [str(problem) for problem in raised.value.problems]


def test_a_suggestion_is_filled_like_the_message(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config_with(LOCKED)))
    obs = Observation(
        route="shop",
        method="POST",
        path="/orders/42/pay",
        kind=ObservationKind.STATUS,
        status=409,
        body=b'{"order": "42"}',
    )
    verdict = Classifier(load_config(str(path))).classify(obs)
    assert verdict is not None
    failure = verdict.failure
    assert failure.message == "order 42 is locked"
    assert failure.fix_required == "Wait until order 42 is unlocked"
    filled = "Ask who holds order 42; {braces} stay literal (POST /orders/42/pay)"
    assert failure.suggestion == filled


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            {"suggestion": "Ask about {invoice}"},
            "error.suggestion: placeholder(s) ['invoice'] match no named capture",
        ),
        ({"suggestion": "a { lone brace"}, "error.suggestion: expected '}' before end"),
        ({"message": "a } lone brace"}, "error.message: Single '}' encountered"),
        ({"fix_required": "Pay {order!r}"}, "error.fix_required: {order...}: a placeholder is"),
        ({"message": "order {order:>8}"}, "error.message: {order...}: a placeholder is"),
    ],
    ids=["unknown-in-suggestion", "lone-open", "lone-close", "conversion", "format-spec"],
)
def test_check_refuses_what_could_not_be_filled(
    tmp_path: Path, error: dict[str, str], said: str
) -> None:
    found = problems(tmp_path, **error)
    assert any(said in problem for problem in found), found


def locked_app() -> web.Application:
    async def pay(request: web.Request) -> web.Response:
        return web.json_response({"order": "42", "message": "locked"}, status=409)

    app = web.Application()
    app.router.add_post("/orders/42/pay", pay)
    return app


async def test_a_running_gateway_sends_the_suggestion_filled(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(locked_app())
    port, admin = free_port(), free_port()
    data = config_with(LOCKED, listen=f"127.0.0.1:{port}", admin=f"127.0.0.1:{admin}")
    data["routes"][0]["upstream"] = upstream
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    process = await start_process("serve", "--config", str(path))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz", process)
            async with session.post(f"http://127.0.0.1:{port}/orders/42/pay") as response:
                assert response.status == 409
                error = (await response.json())["error"]
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr
    assert error["code"] == "ORDER_LOCKED"
    assert error["suggestion"] == (
        "Ask who holds order 42; {braces} stay literal (POST /orders/42/pay)"
    )
