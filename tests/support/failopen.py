"""Fail-open checks shared by the HTTP and MCP suites: inject a fault into one enrichment
step, then prove the caller got the upstream's own status, headers and bytes (compared by
hash) with nothing the gateway would have added."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDictProxy

from gateway.serve.generation import STATE
from tests.support.gateway import RunningGateway

ADVISORY = ("X-Error-Code", "X-Error-Retryable", "X-Error-Recoverable", "X-Recovery-Available")
IGNORED = frozenset({"date", "via", "x-request-id", "server"})
STEPS = {
    "classify": ("classifier", "classify"),
    "render": ("gateway.exchange.answer", "render"),
    "message-template": ("gateway.classify.engine", "build_failure"),
}
"""Steps of classify → resolve → render that can raise: (owner, attribute) to replace."""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def comparable(headers: CIMultiDictProxy[str]) -> list[tuple[str, str]]:
    return sorted((k.lower(), v) for k, v in headers.items() if k.lower() not in IGNORED)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    seconds: float


async def ask(
    session: aiohttp.ClientSession, url: str, method: str = "POST", **kwargs: Any
) -> Answer:
    started = time.monotonic()
    async with session.request(method, url, **kwargs) as response:
        body = await response.read()
        return Answer(response.status, response.headers, body, time.monotonic() - started)


def assert_original(got: Answer, direct: Answer) -> None:
    """Byte for byte what the upstream sent, and nothing the gateway would have added."""
    assert got.status == direct.status
    assert sha(got.body) == sha(direct.body)
    assert comparable(got.headers) == comparable(direct.headers)
    for name in ADVISORY:
        assert name not in got.headers


def inject_fault(
    monkeypatch: pytest.MonkeyPatch, gateway: RunningGateway, owner: str, attribute: str
) -> None:
    """Make one step raise: the live config's classifier, or a module-level function."""

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected")

    if owner == "classifier":
        target: object = gateway.server.runner.app[STATE].current.exchange.classifier
        monkeypatch.setattr(target, attribute, explode)
    else:
        monkeypatch.setattr(f"{owner}.{attribute}", explode)
