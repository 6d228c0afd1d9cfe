"""The httpx transports against the orders API behind a real `mendpoint serve`: what each
failure class costs, counted where the requests land (the API's own hit counts)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from agents_live import Api
from mendpoint_agents import (
    Action,
    CorrectableFailure,
    Policy,
    TerminalFailure,
    TransientFailure,
    run_fix_command,
)
from mendpoint_agents.httpx import MendpointAsyncTransport, MendpointTransport


def test_a_transient_failure_is_retried_after_the_advised_delay(api: Api) -> None:
    path = f"/quota/{uuid.uuid4().hex}"
    with httpx.Client(transport=MendpointTransport(), base_url=api.gateway) as client:
        started = time.monotonic()
        response = client.get(path)
        took = time.monotonic() - started
    assert response.status_code == 200
    assert response.json() == {"remaining": 9}
    assert api.hits()[path] == 2
    assert took >= 0.2  # the API's retry_after, as the gateway relayed it


@pytest.mark.parametrize(
    ("method", "path", "body", "raised", "code"),
    [
        ("POST", "/orders", {"qty": 0}, CorrectableFailure, "BAD_REQUEST"),
        ("POST", "/spring", {}, CorrectableFailure, "MISSING_PARAMETER"),
        ("GET", "/items/9", None, TerminalFailure, "NOT_FOUND"),
        # A 503 to a POST without Retry-After: the mail may be out; never sent again.
        ("POST", "/mail", {}, TerminalFailure, "SERVICE_UNAVAILABLE"),
    ],
    ids=["correctable", "additive-failure", "terminal", "possibly-applied"],
)
def test_what_is_not_retryable_is_sent_once_and_raised_by_class(
    api: Api,
    method: str,
    path: str,
    body: object,
    raised: type[Exception],
    code: str,
) -> None:
    before = api.hits().get(path, 0)
    with (
        httpx.Client(transport=MendpointTransport(), base_url=api.gateway) as client,
        pytest.raises(raised) as failure,
    ):
        client.request(method, path, json=body)
    assert api.hits()[path] == before + 1
    decision = failure.value.decision  # type: ignore[attr-defined]
    assert decision.code == code
    assert failure.value.result.status_code >= 400  # type: ignore[attr-defined]
    if raised is CorrectableFailure:
        assert decision.fix_required
        assert decision.fix_required in str(failure.value)


def test_a_fix_command_runs_only_for_a_caller_who_opted_in(api: Api) -> None:
    api.token_file.unlink(missing_ok=True)
    before = api.hits().get("/me", 0)
    with httpx.Client(transport=MendpointTransport(), base_url=api.gateway) as client:
        with pytest.raises(CorrectableFailure) as refused:
            client.get("/me")
        assert refused.value.decision.fix_command == f"touch {api.token_file}"
        assert not api.token_file.exists()
    opted = MendpointTransport(policy=Policy(run_fix=run_fix_command))
    with httpx.Client(transport=opted, base_url=api.gateway) as client:
        response = client.get("/me")
    assert response.json() == {"agent": 7}
    assert api.token_file.exists()
    assert api.hits()["/me"] == before + 3  # refused once; then failed, fixed, called again


def test_retries_stop_at_the_attempts_and_the_longest_wait(api: Api) -> None:
    for policy in (Policy(max_attempts=1), Policy(max_wait_ms=100)):
        path = f"/quota/{uuid.uuid4().hex}"
        transport = MendpointTransport(policy=policy)
        with (
            httpx.Client(transport=transport, base_url=api.gateway) as client,
            pytest.raises(TransientFailure) as failure,
        ):
            client.get(path)
        assert failure.value.decision.action is Action.RETRY
        assert failure.value.decision.retry_after_ms == 200
        assert api.hits()[path] == 1


async def test_the_async_transport_follows_the_same_ladder(api: Api) -> None:
    path = f"/quota/{uuid.uuid4().hex}"
    async with httpx.AsyncClient(
        transport=MendpointAsyncTransport(), base_url=api.gateway
    ) as client:
        assert (await client.get(path)).json() == {"remaining": 9}
        with pytest.raises(TerminalFailure):
            await client.get("/items/9")
    assert api.hits()[path] == 2


def test_successes_pass_untouched(api: Api) -> None:
    with (
        httpx.Client(transport=MendpointTransport(), base_url=api.gateway) as client,
        client.stream("GET", "/items/1") as response,
    ):
        assert not response.is_stream_consumed  # not read by the transport
        assert response.read() == httpx.get(api.direct + "/items/1").content
