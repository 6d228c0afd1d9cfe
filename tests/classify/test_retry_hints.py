"""Retry hints from every common source, and what an Idempotency-Key makes retryable."""

from __future__ import annotations

import email.utils
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from gateway.classify import Classifier, Observation, ObservationKind
from gateway.classify.retry_hints import hinted_delay_ms, retry_info_ms
from gateway.config.loader import embedded_config, load_config
from gateway.failure import TransportKind
from tests.support.gateway import StartGateway, StartUpstream, route_config

NOW = 1_800_000_000.0
CHECK_EFFECT = "The request may have been processed; check its effect before sending it again"


def observed(headers: dict[str, str] | None = None, body: Any = None, **kw: Any) -> Observation:
    raw = None if body is None else json.dumps(body).encode()
    kind = ObservationKind.TRANSPORT if "transport" in kw else ObservationKind.STATUS
    fields: dict[str, Any] = {"route": "default", "method": "GET", "path": "/x", **kw}
    return Observation(kind=kind, headers=CIMultiDict(headers or {}), body=raw, **fields)


def retry_info(delay: Any) -> dict[str, Any]:
    return {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE"},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay},
            ],
        }
    }


HEADER_HINTS = {
    "retry-after-seconds": ({"Retry-After": "30"}, 30_000),
    "retry-after-date": (
        {"Retry-After": email.utils.formatdate(NOW + 90, usegmt=True)},
        90_000,
    ),
    "retry-after-ms": ({"retry-after-ms": "1500", "Retry-After": "2"}, 1500),
    "ratelimit-draft-structured": ({"RateLimit": '"default";r=0;t=42'}, 42_000),
    "ratelimit-draft-two-policies": ({"RateLimit": '"burst";r=5;t=1, "day";r=0;t=600'}, 600_000),
    "ratelimit-older-draft": ({"RateLimit": "limit=100, remaining=0, reset=7"}, 7000),
    "ratelimit-reset": ({"RateLimit-Reset": "12"}, 12_000),
    "x-ratelimit-reset-seconds": ({"X-RateLimit-Reset": "20"}, 20_000),
    "x-ratelimit-reset-unix": ({"X-RateLimit-Reset": str(int(NOW) + 60)}, 60_000),
    "x-ratelimit-reset-unix-ms": ({"X-RateLimit-Reset": str(int(NOW * 1000) + 5000)}, 5000),
    "x-ratelimit-reset-duration": ({"x-ratelimit-reset": "6m0s"}, 360_000),
}


@pytest.mark.parametrize(("headers", "ms"), HEADER_HINTS.values(), ids=HEADER_HINTS)
def test_header_hints(headers: dict[str, str], ms: float) -> None:
    assert hinted_delay_ms(observed(headers), now=NOW) == pytest.approx(ms, abs=1)


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "soon"},
        {"retry-after-ms": "-5"},
        {"RateLimit": '"default";r=3;t=30'},  # quota not exhausted: no wait
        {"X-RateLimit-Reset": "nan"},
        {"RateLimit-Reset": "inf"},
    ],
    ids=["words", "negative", "not-exhausted", "nan", "inf"],
)
def test_what_is_not_a_hint_is_ignored(headers: dict[str, str]) -> None:
    assert hinted_delay_ms(observed(headers), now=NOW) is None


@pytest.mark.parametrize(
    ("delay", "ms"),
    [("30s", 30_000), ("1.5s", 1500), ({"seconds": 2, "nanos": 500_000_000}, 2500)],
    ids=["seconds", "fraction", "object"],
)
def test_aip_193_retry_info(delay: Any, ms: float) -> None:
    assert retry_info_ms(retry_info(delay)) == ms
    assert hinted_delay_ms(observed(body=retry_info(delay)), now=NOW) == ms


def test_retry_info_needs_its_type() -> None:
    body = {"error": {"details": [{"@type": "x.ErrorInfo", "retryDelay": "3s"}]}}
    assert retry_info_ms(body) is None


@pytest.mark.parametrize(
    ("headers", "body", "ms"),
    [
        ({"RateLimit": '"default";r=0;t=9'}, None, 9000),
        ({}, retry_info("4s"), 4000),
        ({"x-ratelimit-reset": "3"}, None, 3000),
        ({}, None, 1000),
    ],
    ids=["ratelimit", "retry-info", "x-ratelimit-reset", "default"],
)
def test_the_shipped_429_rule_reads_every_hint(headers: dict[str, str], body: Any, ms: int) -> None:
    classifier = Classifier(embedded_config("http://127.0.0.1:9"))
    verdict = classifier.classify(observed(headers, body, status=429, method="POST"))
    # An AIP-193 body is Google's shape: the google-aip193 pack answers it, reading the same hint.
    expected = "google-aip193-retry-info" if body is not None else "http-429"
    assert verdict is not None and verdict.rule.id == expected
    assert verdict.failure.retry_after_ms == ms


# --- side effects and Idempotency-Key ---------------------------------------------------


@pytest.mark.parametrize(
    ("method", "key", "headers", "rule", "retryable"),
    [
        ("POST", False, {}, "http-503", False),
        ("POST", True, {}, "http-503-idempotent", True),
        ("POST", False, {"Retry-After": "3"}, "http-503-retry-after", True),
        ("GET", False, {}, "http-503-idempotent", True),
        ("PATCH", False, {}, "http-503", False),
    ],
    ids=["post", "post-with-key", "post-with-retry-after", "get", "patch"],
)
def test_a_503_is_retryable_only_when_a_repeat_is_safe(
    method: str, key: bool, headers: dict[str, str], rule: str, retryable: bool
) -> None:
    classifier = Classifier(embedded_config("http://127.0.0.1:9"))
    obs = observed(headers, status=503, method=method, idempotent=method == "GET")
    obs.idempotency_key = key
    verdict = classifier.classify(obs)
    assert verdict is not None
    assert (verdict.rule.id, verdict.failure.retryable) == (rule, retryable)
    assert (verdict.failure.suggestion == CHECK_EFFECT) is not retryable


@pytest.mark.parametrize("kind", [TransportKind.RESET, TransportKind.READ_TIMEOUT])
def test_an_idempotency_key_makes_a_post_transport_failure_retryable(
    kind: TransportKind,
) -> None:
    classifier = Classifier(embedded_config("http://127.0.0.1:9"))
    without = classifier.classify(observed(method="POST", idempotent=False, transport=kind))
    keyed = observed(method="POST", idempotent=False, transport=kind, idempotency_key=True)
    with_key = classifier.classify(keyed)
    assert without is not None and with_key is not None
    assert not without.failure.retryable and without.failure.suggestion == CHECK_EFFECT
    assert with_key.failure.retryable and with_key.failure.suggestion is None


async def test_idempotency_key_through_the_gateway(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """A POST's 503 without Retry-After: retryable only for the caller that sent a key."""
    seen: list[str | None] = []

    async def busy(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Idempotency-Key"))
        return web.json_response({"message": "overloaded"}, status=503)

    app = web.Application()
    app.router.add_post("/orders", busy)
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream, mode="envelope"))
    answers = []
    for headers in ({"Idempotency-Key": " "}, {"Idempotency-Key": "k-1"}):
        async with await gateway.request("POST", "/orders", json={}, headers=headers) as answer:
            answers.append(
                (answer.status, answer.headers.get("X-Error-Retryable"), await answer.json())
            )
    (status, flag, plain), (keyed_status, keyed_flag, keyed) = answers
    # The key travels to the upstream as sent; a blank one declares nothing.
    assert seen[1] == "k-1" and seen[0] is not None and not seen[0].strip()
    assert (status, flag, plain["error"]["retryable"]) == (503, "false", False)
    assert plain["error"]["suggestion"] == CHECK_EFFECT
    assert (keyed_status, keyed_flag, keyed["error"]["retryable"]) == (503, "true", True)
    assert keyed["error"]["retry_after_ms"] == 1000


def test_hints_can_be_turned_off(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(
        "routes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n"
        "rules:\n  - id: r\n    match: {status: [429]}\n"
        "    error: {code: SLOW, category: RATE_LIMITED, retryable: true,"
        " side_effect_free: true, retry_after_ms: {default: 700, hints: false}}\n"
    )
    verdict = Classifier(load_config(str(path))).classify(
        observed({"Retry-After": "9"}, status=429, route="api")
    )
    assert verdict is not None and verdict.failure.retry_after_ms == 700


async def test_a_ratelimit_hint_becomes_retry_after_through_the_gateway(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    """An upstream that says when only in `RateLimit`: the caller gets `Retry-After` too."""

    async def limited(request: web.Request) -> web.Response:
        headers = {"RateLimit": '"default";r=0;t=7', "RateLimit-Policy": '"default";q=10;w=60'}
        return web.json_response({"message": "slow down"}, status=429, headers=headers)

    app = web.Application()
    app.router.add_post("/orders", limited)
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream, mode="envelope"))
    async with await gateway.request("POST", "/orders", json={}) as answer:
        body = await answer.json()
    assert answer.status == 429
    assert answer.headers["RateLimit"] == '"default";r=0;t=7'  # the upstream's own, kept
    assert answer.headers["Retry-After"] == "7"
    assert body["error"]["retryable"] is True and body["error"]["retry_after_ms"] == 7000
