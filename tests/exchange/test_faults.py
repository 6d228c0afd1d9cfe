"""Upstream faults (docs/security.md): every way an upstream can misbehave, from one fault server.

For each fault the outcome is one of three, and only one is right:
- a synthesised 502/504 failure with the right code, category and retryability (nothing had
  been sent to the client yet);
- an aborted client connection (the head was already sent, so a cleanly framed short body
  would be a lie);
- the upstream's response passed through unchanged (compared by hash), advisory headers at
  most.

Throughout, the gateway keeps answering ordinary requests, sends each request upstream
exactly once, and keeps its memory bounded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import aiohttp
import pytest

from tests.support.faultserver import (
    BIG_BODY_BYTES,
    INVALID_JSON,
    SHORT_DRIP_ERROR,
    FaultServer,
    closed_port_url,
    gzip_bomb_body,
)
from tests.support.gateway import RunningGateway, StartGateway

READ_TIMEOUT_S = 1.0
RESPONSE_TIMEOUT_S = 2.0
ADVISORY = ("X-Error-Code", "X-Error-Retryable", "X-Error-Recoverable", "X-Recovery-Available")


class Outcome(Enum):
    SYNTHESISED = "synthesised"
    ABORTED = "aborted"
    PASSED = "passed"


@dataclass(frozen=True)
class Expect:
    outcome: Outcome
    status: int
    code: str | None = None
    category: str | None = None
    retryable: bool | None = None
    body_sha256: str | None = None


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def big_body_sha() -> str:
    digest = hashlib.sha256()
    chunk = b"E" * (256 << 10)
    for _ in range(BIG_BODY_BYTES // len(chunk)):
        digest.update(chunk)
    return digest.hexdigest()


def lost(retryable: bool = True) -> Expect:
    return Expect(Outcome.SYNTHESISED, 502, "UPSTREAM_CONNECTION_LOST", "UNAVAILABLE", retryable)


BAD_RESPONSE = Expect(Outcome.SYNTHESISED, 502, "UPSTREAM_BAD_RESPONSE", "UPSTREAM_ERROR", False)
TIMED_OUT = Expect(Outcome.SYNTHESISED, 504, "UPSTREAM_TIMEOUT", "TIMEOUT", True)
CUT = Expect(Outcome.ABORTED, 200)

FAST: dict[str, Expect] = {
    "refuse": Expect(Outcome.SYNTHESISED, 502, "UPSTREAM_UNREACHABLE", "UNAVAILABLE", True),
    "rst-before-headers": lost(),
    "close-before-headers": lost(),
    "rst-mid-body": CUT,
    "short-content-length": CUT,
    "truncated-chunked": CUT,
    "invalid-chunk-size": BAD_RESPONSE,
    "cl-and-te": BAD_RESPONSE,
    "too-many-headers": BAD_RESPONSE,
    "switching-protocols": BAD_RESPONSE,
    "slow-headers": TIMED_OUT,
    "drip-error-body": TIMED_OUT,
    "drip-success-body": Expect(Outcome.PASSED, 200, body_sha256=sha(b"drip")),
    "invalid-json": Expect(
        Outcome.PASSED, 400, "BAD_REQUEST", "VALIDATION_ERROR", False, sha(INVALID_JSON)
    ),
    "gzip-bomb": Expect(
        Outcome.PASSED,
        500,
        "UPSTREAM_INTERNAL_ERROR",
        "UPSTREAM_ERROR",
        False,
        sha(gzip_bomb_body()),
    ),
}
SLOW: dict[str, Expect] = {
    "big-error-body": Expect(
        Outcome.PASSED, 500, "UPSTREAM_INTERNAL_ERROR", "UPSTREAM_ERROR", False, big_body_sha()
    ),
    "big-error-body-chunked": Expect(
        Outcome.PASSED, 500, "UPSTREAM_INTERNAL_ERROR", "UPSTREAM_ERROR", False, big_body_sha()
    ),
}
CASES = [pytest.param(name, expect, id=name) for name, expect in FAST.items()] + [
    pytest.param(name, expect, id=name, marks=pytest.mark.slow) for name, expect in SLOW.items()
]


@pytest.fixture
async def faults() -> AsyncIterator[FaultServer]:
    server = await FaultServer().start()
    yield server
    await server.close()


def fault_config(faults: FaultServer, mode: str = "additive") -> dict[str, object]:
    return {
        "routes": [
            {"name": "faults", "prefix": "/", "upstream": faults.url, "mode": mode},
            {
                "name": "refused",
                "prefix": "/fault/refuse",
                "upstream": closed_port_url(),
                "mode": mode,
            },
        ],
        "limits": {"read_timeout_s": READ_TIMEOUT_S, "response_timeout_s": RESPONSE_TIMEOUT_S},
    }


@dataclass(frozen=True)
class Received:
    status: int
    headers: dict[str, str]
    body_sha256: str
    body: bytes
    aborted: bool
    seconds: float


async def receive(gateway: RunningGateway, path: str) -> Received:
    """Read a response whole while hashing it; keeps at most 64 KiB of it."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with gateway.session.get(gateway.url + path) as response:
        digest, kept, aborted = hashlib.sha256(), b"", False
        try:
            async for chunk in response.content.iter_chunked(256 << 10):
                digest.update(chunk)
                if len(kept) < 65536:
                    kept += chunk[:65536]
        except aiohttp.ClientPayloadError:
            aborted = True
        headers = {k: v for k, v in response.headers.items()}
        return Received(
            response.status, headers, digest.hexdigest(), kept, aborted, loop.time() - started
        )


async def keep_asking(gateway: RunningGateway, stop: asyncio.Event) -> int:
    """Plain requests during the fault: every one must be answered 200 `ok`."""
    answered = 0
    while not stop.is_set():
        async with gateway.session.get(gateway.url + "/ok") as response:
            assert response.status == 200
            assert await response.read() == b"ok"
        answered += 1
        await asyncio.sleep(0.05)
    return answered


def check(expect: Expect, got: Received) -> None:
    assert got.status == expect.status, got
    if expect.outcome is Outcome.ABORTED:
        assert got.aborted, "a cut body must never arrive as a cleanly framed short one"
        return
    assert not got.aborted
    assert got.seconds < RESPONSE_TIMEOUT_S + 3
    if expect.code is not None:
        assert got.headers["X-Error-Code"] == expect.code
        assert got.headers["X-Error-Retryable"] == str(expect.retryable).lower()
    else:
        for name in ADVISORY:
            assert name not in got.headers
    if expect.outcome is Outcome.PASSED:
        assert got.body_sha256 == expect.body_sha256
        return
    envelope = json.loads(got.body)
    assert envelope["failure"]["category"] == expect.category
    assert envelope["error"]["retryable"] is expect.retryable
    assert envelope["meta"]["upstream_status"] is None


@pytest.mark.parametrize(("name", "expect"), CASES)
async def test_fault_outcome_and_the_gateway_keeps_serving(
    name: str, expect: Expect, faults: FaultServer, start_gateway: StartGateway
) -> None:
    gateway = await start_gateway(fault_config(faults))
    stop = asyncio.Event()
    others = asyncio.ensure_future(keep_asking(gateway, stop))
    try:
        got = await receive(gateway, f"/fault/{name}")
    finally:
        stop.set()
        answered = await others
    check(expect, got)
    assert answered >= 1
    if name != "refuse":
        assert faults.seen[name] == 1, "each request goes upstream exactly once"
    # And after it, the gateway still works.
    after = await receive(gateway, "/after")
    assert (after.status, after.body) == (200, b"ok")


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["big-error-body", "big-error-body-chunked", "gzip-bomb"])
async def test_big_and_bomb_error_bodies_keep_memory_bounded(
    name: str, faults: FaultServer, start_gateway: StartGateway
) -> None:
    """Gateway, fault server and client share this process: all of it must stay flat."""
    gateway = await start_gateway(fault_config(faults))
    await receive(gateway, f"/fault/{name}")  # warm up buffers and pools
    baseline = rss_bytes()
    for _ in range(3):
        got = await receive(gateway, f"/fault/{name}")
        assert got.status == 500
        assert not got.aborted
    growth = rss_bytes() - baseline
    assert growth < 32 << 20, f"RSS grew by {growth / 2**20:.1f} MiB"


@pytest.mark.parametrize("mode", ["original", "headers", "additive"])
async def test_drip_fed_head_times_out_in_every_mode(
    mode: str, faults: FaultServer, start_gateway: StartGateway
) -> None:
    """A per-read timeout never fires on a drip; the response deadline does, in every mode."""
    gateway = await start_gateway(fault_config(faults, mode))
    got = await receive(gateway, "/fault/slow-headers")
    assert got.status == 504
    assert RESPONSE_TIMEOUT_S - 0.2 < got.seconds < RESPONSE_TIMEOUT_S + 2
    assert (got.headers.get("X-Error-Code") == "UPSTREAM_TIMEOUT") is (mode != "original")


async def test_drip_fed_error_body_within_the_deadline_is_classified(
    faults: FaultServer, start_gateway: StartGateway
) -> None:
    """The deadline is a bound, not a penalty: a slow but timely error body is still read."""
    config = fault_config(faults, "envelope")
    config["limits"] = {"read_timeout_s": READ_TIMEOUT_S, "response_timeout_s": 60}
    gateway = await start_gateway(config)
    got = await receive(gateway, "/fault/drip-short-error")
    assert got.status == 500
    assert got.seconds > READ_TIMEOUT_S
    body = json.loads(got.body)
    assert body["meta"]["original"]["body"] == json.loads(SHORT_DRIP_ERROR)
