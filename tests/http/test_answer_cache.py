"""The answer cache answers exactly what enriching again would (docs/performance.md).

Every HTTP fixture of every shipped pack, in every mode, for JSON and HTML clients, goes to an
enricher without the cache and to one with it, as several requests with their own request ids
(quotes and backslashes included) and durations: the rendering (headers, body, content type)
and the access record must be the same, byte for byte, whether the answer was enriched, kept or
replayed; and what can be kept must be answered from the cache the second time.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.classify import Classifier, Observation, ObservationKind
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import builtin_names, builtin_text, load_config
from gateway.enrich.step import Enricher, FailureContext
from gateway.exchange.answer import Answers, Rendering, RouteAnswers
from gateway.failure import NO_RECOVERY, Mode
from gateway.http.answer_cache import ENTRY_OVERHEAD_BYTES, AnswerCache
from gateway.http.cached_answers import CachedAnswers
from gateway.offline.fixtures import FixtureCase, load_fixtures, sample_of
from gateway.resolve.callers import Caller
from gateway.resolve.service import Situation
from gateway.telemetry.logs import AccessNotes, AccessRecord

NOW = 5000.0
INTENTS = ("credential_refresh", "input_validation", "payload_reduction")
REQUEST_IDS = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)


def config(root: Path) -> LoadedConfig:
    """The embedded defaults (every pack) with a catalog that offers a skill per intent,
    one of them only to callers with a scope."""
    skills = [
        {
            "name": f"fix.{intent}",
            "version": "1.0.0",
            "recovers": [intent],
            "repair": "inspect",
            "purpose": f"Repairs {intent}",
            "scopes": ["data:read"] if intent == "input_validation" else [],
        }
        for intent in INTENTS
    ]
    routes = [{"name": "default", "prefix": "/", "upstream": "http://127.0.0.1:9"}]
    path = root / "gateway.yaml"
    # No budget to run over on a loaded machine: a fall-back is not what is compared here.
    data = {"routes": routes, "skills": skills, "enrich_budget_ms": 60_000}
    path.write_text(json.dumps(data))
    return load_config(str(path))


def http_cases() -> list[tuple[str, FixtureCase]]:
    cases = []
    for name in builtin_names():
        for case in load_fixtures(builtin_text(f"fixtures/{name}"), name).cases:
            if case.response is not None:
                cases.append((name, case))
    return cases


CASES = http_cases()


def observation(case: FixtureCase, instant: float | None = None) -> Observation:
    sample = sample_of(case)
    return Observation(
        route="default",
        method=sample.method,
        path=sample.path,
        kind=ObservationKind.STATUS,
        status=sample.status,
        headers=sample.headers,
        body=sample.body,
        content_type=sample.headers.get("Content-Type", ""),
        idempotent=sample.method in ("GET", "HEAD", "PUT", "DELETE", "OPTIONS"),
        instant=instant,
    )


def context(
    case: FixtureCase, mode: Mode, request_id: str, duration_ms: int, accept_json: bool
) -> tuple[FailureContext, RouteAnswers]:
    """The failure's context (its access record the observers write on) and what the route
    and the request's `Accept` decide."""
    scopes = frozenset({"data:read"}) if len(request_id) % 2 else frozenset()
    ctx = FailureContext(
        route="default",
        mode=mode,
        request_id=request_id,
        caller=Caller("agent" if scopes else None, scopes),
        situation=Situation(operation=f"{case.request.method} {case.request.path}"),
        started=NOW - duration_ms / 1000,
        notes=AccessRecord(request_id, case.request.method, case.request.path, 0.0),
    )
    return ctx, RouteAnswers(json_clients=True, prefers_json=accept_json)


def enrichers(loaded: LoadedConfig) -> tuple[CachedAnswers, CachedAnswers]:
    def built() -> CachedAnswers:
        return CachedAnswers.build(loaded, Answers(Enricher.build(loaded, (AccessNotes(),))))

    uncached, cached = built(), built()
    uncached.answers = None
    assert cached.answers is not None
    for answers in (uncached, cached):
        answers.step.clock = lambda: NOW
    return uncached, cached


def recorded(ctx: tuple[FailureContext, RouteAnswers]) -> tuple[Any, ...]:
    record = ctx[0].notes
    assert isinstance(record, AccessRecord)
    return (record.failure_code, record.rule, record.mode, record.retryable, record.retry_after_ms)


def parts(rendering: Rendering | None) -> tuple[Any, ...] | None:
    if rendering is None:
        return None
    return (list(rendering.headers), rendering.body, rendering.content_type)


class Answering:
    """The config, under a short name: hypothesis prints what a failing example was given."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.loaded = loaded

    def __repr__(self) -> str:
        return "Answering(every pack, a catalog)"


@pytest.fixture(scope="module")
def answering(tmp_path_factory: pytest.TempPathFactory) -> Answering:
    return Answering(config(tmp_path_factory.mktemp("answers")))


@pytest.mark.parametrize("mode", list(Mode))
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    requests=st.lists(
        st.tuples(REQUEST_IDS, st.integers(min_value=0, max_value=10**6)), min_size=2, max_size=3
    ),
    accept_json=st.booleans(),
)
def test_cached_answers_are_the_uncached_answers(
    answering: Answering, mode: Mode, requests: list[tuple[str, int]], accept_json: bool
) -> None:
    uncached, cached = enrichers(answering.loaded)
    assert cached.answers is not None

    hits = []
    again = (requests[0][0], requests[-1][1] + 1)  # the first request's key, a new duration

    async def compare(case: FixtureCase) -> None:
        seen = set()
        for request_id, duration_ms in [*requests, again]:
            direct_ctx = context(case, mode, request_id, duration_ms, accept_json)
            direct_obs = observation(case)
            direct = await uncached.response(direct_obs, *direct_ctx)
            # The same request: the same wall-clock instant if its verdict read the clock.
            via_obs = observation(case, direct_obs.instant)
            via_ctx = context(case, mode, request_id, duration_ms, accept_json)
            key = cached.answer_key(via_obs, *via_ctx)
            assert key is not None
            kept = cached.answers.get(key) if cached.answers else None
            via = await cached.response(via_obs, *via_ctx)
            assert parts(via) == parts(direct), case.name
            assert recorded(via_ctx) == recorded(direct_ctx), case.name
            matched = recorded(direct_ctx)[0] is not None
            if key in seen and direct_obs.instant is None and matched:
                assert kept is not None, f"{case.name}: the repeat was not a hit"
                hits.append(case.name)
            seen.add(key)

    async def run_all() -> None:
        for _, case in CASES:
            await compare(case)

    asyncio.run(run_all())
    assert len(set(hits)) > len(CASES) // 2


def test_every_pack_gives_http_cases() -> None:
    packs = {name for name, _ in CASES}
    assert packs >= set(builtin_names()) - {"mcp-defaults"}


def rate_limited(headers: dict[str, str]) -> FixtureCase:
    return FixtureCase.model_validate(
        {
            "name": "429",
            "request": {"method": "GET", "path": "/v1/items"},
            "response": {"status": 429, "json": {"error": "slow down"}, "headers": headers},
            "expect": {"code": "RATE_LIMITED"},
        }
    )


def test_a_header_the_rules_read_is_part_of_the_key(answering: Answering) -> None:
    """The same body with another `Retry-After` (or none) is another answer, not a hit."""
    uncached, cached = enrichers(answering.loaded)
    headers = [{"Retry-After": "30"}, {"Retry-After": "60"}, {}, {"Retry-After": "30"}]

    async def both(case: FixtureCase) -> tuple[Any, Any]:
        direct = await uncached.response(
            observation(case), *context(case, Mode.ADDITIVE, "r", 1, False)
        )
        via = await cached.response(observation(case), *context(case, Mode.ADDITIVE, "r", 1, False))
        return parts(direct), parts(via)

    async def run_all() -> list[tuple[Any, Any]]:
        return [await both(rate_limited(h)) for h in headers]

    answers = asyncio.run(run_all())
    assert all(direct == via for direct, via in answers)
    assert len({repr(direct) for direct, _ in answers}) == 3
    assert cached.answers is not None and len(cached.answers) == 3


@pytest.mark.parametrize("mode", [Mode.ADDITIVE, Mode.ENVELOPE, Mode.HEADERS])
@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"},  # the upstream's own header stays
        {"X-RateLimit-Reset": "4096250880"},  # a Unix time: the gateway adds Retry-After
    ],
)
def test_a_retry_delay_counted_down_to_an_instant_is_worked_out_per_request(
    answering: Answering, mode: Mode, headers: dict[str, str]
) -> None:
    """Kept, with the delay filled in for each request from its own moment: the same bytes
    as enriching at that moment, and another delay a second later."""
    uncached, cached = enrichers(answering.loaded)
    case = rate_limited(headers)
    reset = 4_096_250_880.0  # both name this instant
    instants = [reset - 600, reset - 600, reset - 30.5, reset - 2.25]

    async def both(n: int, instant: float) -> tuple[Any, Any, Any, Any]:
        direct_ctx = context(case, mode, f"r{n}", n, False)
        direct = await uncached.response(observation(case, instant), *direct_ctx)
        via_ctx = context(case, mode, f"r{n}", n, False)
        via = await cached.response(observation(case, instant), *via_ctx)
        return parts(direct), parts(via), recorded(direct_ctx), recorded(via_ctx)

    async def run_all() -> list[tuple[Any, Any, Any, Any]]:
        return [await both(n, instant) for n, instant in enumerate(instants)]

    answers = asyncio.run(run_all())
    for direct, via, direct_record, via_record in answers:
        assert via == direct and via_record == direct_record
    delays = [record[4] for _, _, record, _ in answers]
    assert delays[0] == delays[1] and len(set(delays)) == 3 and all(d > 0 for d in delays)
    assert cached.answers is not None and len(cached.answers) == 1


def test_the_cache_is_bounded_by_entries_and_bytes(answering: Answering) -> None:
    """The least recently used answers go first, past either bound."""
    case = rate_limited({})
    obs = observation(case)
    verdict = Classifier(answering.loaded).classify(obs)
    assert verdict is not None
    by_entries = AnswerCache(max_entries=2, max_bytes=10 * ENTRY_OVERHEAD_BYTES)
    by_bytes = AnswerCache(max_entries=100, max_bytes=2 * ENTRY_OVERHEAD_BYTES + 200)
    for cache in (by_entries, by_bytes):
        for key in ("a", "b", "c"):
            cache.keep(key, obs, verdict, NO_RECOVERY, False, None)  # original mode: no body
            assert cache.get("b") is not None or key == "a"  # used: "a" is the oldest
        assert len(cache) == 2 and cache.get("a") is None and cache.get("c") is not None
        assert cache.bytes <= cache.max_bytes


def test_a_verdict_made_with_a_regex_that_timed_out_is_never_kept(tmp_path: Path) -> None:
    routes = [{"name": "default", "prefix": "/", "upstream": "http://127.0.0.1:9"}]
    evil = {"id": "evil", "match": {"status": [400], "body": "^(\\w+\\s?)*$"}}
    evil["error"] = {"code": "EVIL", "category": "VALIDATION_ERROR"}
    data = {"routes": routes, "rules": [evil], "limits": {"regex_timeout_ms": 5}}
    path = tmp_path / "gateway.yaml"
    path.write_text(json.dumps(data))
    _, cached = enrichers(load_config(str(path)))
    case = FixtureCase.model_validate(
        {
            "name": "evil",
            "response": {"status": 400, "body": "a" * 5000 + "!"},
            "expect": {"code": "BAD_REQUEST"},
        }
    )
    obs = observation(case)
    rendering = asyncio.run(cached.response(obs, *context(case, Mode.ADDITIVE, "r", 1, False)))
    assert obs.regex_gave_up and rendering is not None
    assert cached.answers is not None and len(cached.answers) == 0
