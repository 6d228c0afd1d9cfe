"""How many bridge sessions a route, and each holder on it, has open across the processes of
one gateway (docs/mcp.md#sessions-belong-to-their-caller).

A session's child lives in one process, but `max_sessions` and a holder's bound are the
gateway's. In one process the counts are its own (`LocalLedger`). Under `serve --workers N`
each worker asks the supervisor, which keeps the one `Ledger` of every worker's sessions
(`WorkerLedger`, over the worker's link, gateway.serve.workers): whether a caller's fifth
session is refused no longer depends on which worker its `initialize` lands on, nor does a
route run N times `max_sessions` children. A claim counts from when it is granted, while its
child starts, and the supervisor answers claims one at a time, so concurrent `initialize`s on
different workers cannot pass a bound together. A worker that exits has its claims dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal, Protocol

log = logging.getLogger("mendpoint.mcp")

Verdict = Literal["granted", "holder", "route"]
"""Granted, or which bound refused it: the holder's own (429) or the route's (503)."""
ASK_TIMEOUT_S = 5.0
"""The supervisor answers from memory on a local socket: past this it is stuck, and the
`initialize` is answered as a full route is (503, retryable)."""


class Ledger:
    """Sessions open (or starting) per route and per (route, holder), and whose they are."""

    def __init__(self) -> None:
        self._routes: Counter[str] = Counter()
        self._holders: Counter[tuple[str, str]] = Counter()
        self._owners: dict[int, Counter[tuple[str, str]]] = {}

    def claim(
        self, route: str, holder: str, holder_limit: int, route_limit: int, owner: int = 0
    ) -> Verdict:
        """One more session for `holder` on `route`, if both bounds allow it. The holder's
        own bound is checked first: a caller at it is told to end one of its own."""
        if self._holders[route, holder] >= holder_limit:
            return "holder"
        if self._routes[route] >= route_limit:
            return "route"
        self._routes[route] += 1
        self._holders[route, holder] += 1
        self._owners.setdefault(owner, Counter())[route, holder] += 1
        return "granted"

    def release(self, route: str, holder: str, owner: int = 0) -> None:
        """A session claimed by `owner` ended (or its child never started)."""
        held = self._owners.get(owner)
        if held is None or held[route, holder] <= 0:
            return  # not this owner's: nothing to give back
        held[route, holder] -= 1
        if not held[route, holder]:
            del held[route, holder]
        self._less(route, holder, 1)

    def forget(self, owner: int) -> None:
        """Every claim of an owner that is gone (a worker that exited)."""
        for (route, holder), count in (self._owners.pop(owner, None) or Counter()).items():
            self._less(route, holder, count)

    def held(self, route: str, holder: str | None = None) -> int:
        return self._routes[route] if holder is None else self._holders[route, holder]

    def _less(self, route: str, holder: str, count: int) -> None:
        self._routes[route] -= count
        if self._routes[route] <= 0:
            del self._routes[route]
        self._holders[route, holder] -= count
        if self._holders[route, holder] <= 0:
            del self._holders[route, holder]


class SessionCounts(Protocol):
    """What `Bridges` asks before it starts a child, and tells when a session ends."""

    async def claim(
        self, route: str, holder: str, holder_limit: int, route_limit: int
    ) -> Verdict: ...

    def release(self, route: str, holder: str) -> None: ...


class LocalLedger:
    """One process's sessions, counted in it."""

    def __init__(self) -> None:
        self.ledger = Ledger()

    async def claim(self, route: str, holder: str, holder_limit: int, route_limit: int) -> Verdict:
        return self.ledger.claim(route, holder, holder_limit, route_limit)

    def release(self, route: str, holder: str) -> None:
        self.ledger.release(route, holder)


class WorkerLedger:
    """A worker's sessions, counted by its supervisor with every sibling's."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._send = send
        self._numbers = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Verdict]] = {}

    async def claim(self, route: str, holder: str, holder_limit: int, route_limit: int) -> Verdict:
        number = next(self._numbers)
        answer: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        claim = {
            "n": number,
            "route": route,
            "holder": holder,
            "holder_limit": holder_limit,
            "route_limit": route_limit,
        }
        self._send({"claim": claim})
        try:
            return await asyncio.wait_for(answer, ASK_TIMEOUT_S)
        except TimeoutError:
            log.error("the supervisor did not answer a session claim in %.0f s", ASK_TIMEOUT_S)
            return "route"
        finally:
            self._waiting.pop(number, None)

    def answered(self, message: object) -> None:
        """The supervisor's `{"n": N, "verdict": V}` for a claim of this worker's."""
        if not isinstance(message, dict):
            return
        number = message.get("n")
        answer = self._waiting.get(number) if isinstance(number, int) else None
        verdict = message.get("verdict")
        if answer is not None and not answer.done() and verdict in ("granted", "holder", "route"):
            answer.set_result(verdict)

    def release(self, route: str, holder: str) -> None:
        self._send({"release": {"route": route, "holder": holder}})


def answer_claim(ledger: Ledger, owner: int, message: dict[str, Any]) -> dict[str, Any] | None:
    """The supervisor's side: a worker's `claim` (its answer) or `release` (None)."""
    claim = message.get("claim")
    if isinstance(claim, dict):
        route, holder = claim.get("route"), claim.get("holder")
        holder_limit, route_limit = claim.get("holder_limit"), claim.get("route_limit")
        if not (isinstance(route, str) and isinstance(holder, str)):
            return {"claimed": {"n": claim.get("n"), "verdict": "route"}}
        if not (isinstance(holder_limit, int) and isinstance(route_limit, int)):
            return {"claimed": {"n": claim.get("n"), "verdict": "route"}}
        verdict = ledger.claim(route, holder, holder_limit, route_limit, owner)
        return {"claimed": {"n": claim.get("n"), "verdict": verdict}}
    release = message.get("release")
    if isinstance(release, dict):
        route, holder = release.get("route"), release.get("holder")
        if isinstance(route, str) and isinstance(holder, str):
            ledger.release(route, holder, owner)
    return None


__all__ = [
    "Ledger",
    "LocalLedger",
    "SessionCounts",
    "Verdict",
    "WorkerLedger",
    "answer_claim",
]
