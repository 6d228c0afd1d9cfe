"""The supervisor's /gaps, /followups and /readyz: its workers' answers joined into one
(docs/operations.md#workers).

Without a fleet store each worker answers for itself and the tables are summed. With one,
a worker's answer is already the fleet's (read from the store), so one is passed on: summing
N of them would count every outcome N times (docs/operations.md#fleet).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from gateway.feedback.followups import merge
from gateway.feedback.signatures import Gap, GapSample, Signature, ranked
from gateway.serve.admin import FLEET, FollowupTable, Ranked, Scope
from gateway.serve.worker_process import Worker


class WorkerTables:
    """The supervisor's /gaps, `POST /gaps/reset` and /followups: each question asked of
    every worker (`ask_all`: a worker silent past its timeout is left out), answers joined."""

    def __init__(self, ask_all: Callable[..., Awaitable[list[dict[str, Any]]]]) -> None:
        self.ask_all = ask_all

    async def gaps(self, limit: int, window_s: float) -> tuple[Ranked, Scope]:
        answers = await self.ask_all("gaps", limit=limit, window_s=window_s)
        return workers_gaps(answers, limit)

    async def reset_gaps(self) -> Scope:
        return workers_reset(await self.ask_all("gaps_reset"))

    async def followups(self) -> FollowupTable:
        return workers_followups(await self.ask_all("followups"))


def workers_details(workers: Mapping[int, Worker], restarts: Sequence[int]) -> dict[str, object]:
    """/readyz's list: each slot's worker pid (None between a crash and its restart),
    readiness and restart count."""
    rows = []
    for index, count in enumerate(restarts):
        worker = workers.get(index)
        rows.append(
            {
                "worker": index,
                "pid": worker.pid if worker else None,
                "ready": worker is not None and worker.ready,
                "restarts": count,
            }
        )
    return {"workers": rows}


def workers_gaps(answers: list[dict[str, Any]], limit: int) -> tuple[Ranked, Scope]:
    """Counts summed per signature (a sample kept from the first worker that has one), or
    the one fleet answer; ranked, at most `limit`."""
    fleet = [a for a in answers if scope_of(a) == "fleet" and isinstance(a.get("gaps"), list)]
    tables = (
        [fleet[0]["gaps"]]
        if fleet
        else [a["gaps"] for a in answers if isinstance(a.get("gaps"), list)]
    )
    totals: dict[Signature, int] = {}
    samples: dict[Signature, GapSample] = {}
    for rows in tables:
        for row in rows:
            if (
                isinstance(row, list)
                and len(row) == 5
                and all(isinstance(v, str) for v in row[:3])
                and isinstance(row[3], int)
            ):
                signature = Signature(row[0], row[1], row[2])
                totals[signature] = totals.get(signature, 0) + row[3]
                sample = GapSample.from_record(row[4])
                if sample is not None:
                    samples.setdefault(signature, sample)
    gaps = [Gap(s, count, samples.get(s)) for s, count in totals.items()]
    return ranked(gaps, limit), FLEET if fleet else workers_scope(answers)


def workers_reset(answers: list[dict[str, Any]]) -> Scope:
    """The scope of a reset every worker made: the fleet's when any reached the store."""
    scopes = [{"scope": a["reset"]} for a in answers if isinstance(a.get("reset"), dict)]
    if any(scope_of(s) == "fleet" for s in scopes):
        return FLEET
    return workers_scope(scopes)


def workers_followups(answers: list[dict[str, Any]]) -> FollowupTable:
    """Rows summed per route and code (gateway.feedback.followups.merge), or the one fleet
    answer."""
    window_s = 0.0
    tables: list[list[dict[str, Any]]] = []
    fleet: list[list[dict[str, Any]]] = []
    scopes: list[dict[str, Any]] = []
    for answer in answers:
        table = answer.get("followups")
        if isinstance(table, dict) and isinstance(table.get("rows"), list):
            window_s = max(window_s, float(table.get("window_s", 0)))
            rows = [r for r in table["rows"] if isinstance(r, dict)]
            scopes.append(table)
            (fleet if scope_of(table) == "fleet" else tables).append(rows)
    if fleet:
        return window_s, merge(fleet[:1]), FLEET
    return window_s, merge(tables), workers_scope(scopes)


def scope_of(answer: dict[str, Any]) -> object:
    scope = answer.get("scope")
    return scope.get("scope") if isinstance(scope, dict) else None


def workers_scope(answers: list[dict[str, Any]]) -> Scope:
    """This host's workers, summed; with the note of a worker whose store is down."""
    for answer in answers:
        scope = answer.get("scope")
        if isinstance(scope, dict) and "note" in scope:
            return {**scope, "scope": "workers"}
    return {"scope": "workers"}
