"""Follow-ups and gaps counted for the fleet: what the books send to the store, what they get
back, and the fleet-wide tables (docs/operations.md#fleet).

Each outcome is counted where the store decides it, exactly once fleet-wide, by the scripts of
gateway.feedback.fleet_scripts: a failure's open, the settlement a follow-up claims, the sweep
of failures past their window, an unmatched signature. Every replica puts what the others
open and close into its own `FollowupBook` (`received`, as a sibling worker's), so matching a
follow-up stays a dictionary lookup where it arrives; a follow-up that outruns the news of its
failure is matched in the store instead.

What arrives from the others, and what is read back from the store, is checked before it is
applied, counted or shown (gateway.feedback.fleet_events): anyone who can write to the Redis
can write there too.

Prometheus counts what the store granted, in the replica it granted it to, so the store's
tables and the sum of the replicas' counters agree. The book still counts in its own tallies:
they are what /followups shows while the store is down. Times cross machines as Unix
milliseconds: monotonic clocks are per machine.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

from gateway.config.loaded import LoadedConfig
from gateway.feedback import fleet_gaps
from gateway.feedback.fleet_events import (
    MAX_TOOLS,
    Reason,
    event_problem,
    label_problem,
    rejected,
    route_shaped,
)
from gateway.feedback.fleet_scripts import SCRIPTS
from gateway.feedback.followups import Answered, Attempt, FollowupBook, OpenFailure, Outcome
from gateway.feedback.signatures import Gap, GapSample, Signature, SignatureBook
from gateway.feedback.store import (
    COUNTS_TTL_S,
    KEY_MARGIN_MS,
    RECOVERY_SAMPLES,
    SEP,
    SWEEP_LIMIT,
    Done,
    FleetStore,
    Operation,
)
from gateway.telemetry.metrics import RECOVERY_SECONDS, count_followup

OUTCOMES = frozenset(o.value for o in Outcome)
MAX_ROWS = 4096
"""(route, code) pairs /followups shows from the store: a config's routes times its codes."""
SUCCESS_MEMORY_MS = 5000
"""How long the store remembers a success that followed no failure it knew of, for the news
of one that was on its way (docs/operations.md#fleet)."""


def wall_ms(monotonic: float, clock: Callable[[], float]) -> int:
    """A time of `clock` (the book's monotonic clock) as Unix milliseconds."""
    return round((time.time() - (clock() - monotonic)) * 1000)


def local_time(wall: float, clock: Callable[[], float]) -> float:
    """Unix milliseconds as a time of `clock`."""
    return clock() - (time.time() - wall / 1000)


class SharedTracking:
    """The store's side of one process's `FollowupBook` and `SignatureBook`."""

    def __init__(
        self,
        store: FleetStore,
        book: FollowupBook,
        gaps_capacity: int,
        routes: frozenset[str],
    ) -> None:
        self.store = store
        self.book = book
        self.gaps_capacity = gaps_capacity
        self.routes = routes
        """The running config's route names: the only ones another replica's event, or a
        Prometheus label read from the store, may name (set again on reload)."""
        self.gaps_clock: Callable[[], float] = time.time
        """Unix seconds: the `SignatureBook`'s clock, whose buckets the store counts in."""
        self.on_hints: Callable[[str, dict[str, Any]], object] | None = None
        """Where other replicas' tool annotations go (the MCP runtime's ToolBook)."""

    @property
    def up(self) -> bool:
        return self.store.up

    # -- what the books send ---------------------------------------------------------------

    def opened(self, entry: OpenFailure, started: float) -> None:
        """A failure answered to a request that started at `started` (the book's clock)."""
        keys = self.store.keys
        clock = self.book.clock
        window_ms = round(self.book.settings.window_s * 1000)
        answered_ms = wall_ms(entry.answered_at, clock)
        record = {
            "key": entry.key,
            "identity": entry.identity,
            "request_id": entry.request_id,
            "route": entry.route,
            "code": entry.code,
            "rule": entry.rule,
            "retryable": entry.retryable,
            "retry_after_ms": entry.retry_after_ms or 0,
            "answered_wall_ms": answered_ms,
            "chain_wall_ms": wall_ms(entry.chain_started, clock),
            "started_wall_ms": wall_ms(started, clock),
        }
        arguments = {
            "key": entry.key,
            "entry": record,
            "deadline_ms": answered_ms + window_ms,
            "ttl_ms": window_ms + KEY_MARGIN_MS,
            "window_ms": window_ms,
            "counts_ttl_s": COUNTS_TTL_S,
            "samples": RECOVERY_SAMPLES,
            "from": self.store.replica,
            "sep": SEP,
        }
        opened_keys = (
            keys.open(entry.key),
            keys.due,
            keys.tally,
            keys.rules,
            keys.events,
            keys.succeeded(entry.key),
            keys.recovery_prefix,
        )
        self._call("open", opened_keys, arguments, self._settled)

    def followed(
        self,
        attempt: Attempt,
        answered: Answered,
        entry: OpenFailure | None,
        outcome: Outcome | None,
    ) -> None:
        """A request that follows `entry` (decided `outcome` here), or, with none, one that
        may follow a failure this process has not heard of. The store settles the failure
        once fleet-wide, and the replica it grants it to counts it in Prometheus."""
        keys = self.store.keys
        clock = self.book.clock
        arguments = {
            "key": attempt.key,
            "request_id": None if entry is None else entry.request_id,
            "outcome": None if outcome is None else outcome.value,
            "attempt": {
                "identity": attempt.identity,
                "started_wall_ms": wall_ms(attempt.started, clock),
                "status": answered.status,
                "code": answered.code,
            },
            "now_ms": round(time.time() * 1000),
            "window_ms": round(self.book.settings.window_s * 1000),
            "samples": RECOVERY_SAMPLES,
            "counts_ttl_s": COUNTS_TTL_S,
            "remember_ms": SUCCESS_MEMORY_MS,
            "from": self.store.replica,
            "sep": SEP,
        }
        follow_keys = (
            keys.open(attempt.key),
            keys.due,
            keys.tally,
            keys.recovery_prefix,
            keys.events,
            keys.succeeded(attempt.key),
        )
        self._call("follow", follow_keys, arguments, self._won)

    def sweep(self) -> None:
        """Count the fleet's failures past their deadline abandoned (any replica may)."""
        if not self.store.up:
            return  # the first sweep after the store returns finds every one still due
        keys = self.store.keys
        arguments = {
            "now_ms": round(time.time() * 1000),
            "open_prefix": keys.open_prefix,
            "limit": SWEEP_LIMIT,
            "window_ms": round(self.book.settings.window_s * 1000),
            "sep": SEP,
        }
        self._call("sweep", (keys.due, keys.tally), arguments, self._abandoned)

    def gap(self, signature: Signature, sample: GapSample | None, now: float) -> None:
        """A failure of `signature` at `now` (the book's clock), with the sample the book took."""
        self.store.enqueue(
            fleet_gaps.write(self.store.keys, self.gaps_capacity, signature, sample, now)
        )

    def _call(
        self,
        script: str,
        keys: tuple[str, ...],
        arguments: dict[str, Any],
        done: Done | None = None,
    ) -> None:
        """One call of a fleet script (gateway.feedback.fleet_scripts), its arguments as one
        object (encoded with the batch it goes in), queued for the store; `done` counts what
        the store granted."""
        self.store.enqueue(Operation(script, keys, arguments, done))

    def hints(self, route: str, tools: dict[str, Any]) -> None:
        """What a `tools/list` here said of `route`'s tools that this replica did not know
        (gateway.mcp.tool_hints), for every other replica's book."""
        names = list(tools)
        for start in range(0, len(names), MAX_TOOLS):  # an event's bound (fleet_events)
            part = {name: tools[name] for name in names[start : start + MAX_TOOLS]}
            event = {"op": "hints", "from": self.store.replica, "route": route, "tools": part}
            text = json.dumps(event)  # published as it is, not decoded in Redis
            argument = {"event": text, "from": self.store.replica}
            self.store.enqueue(Operation("publish", (self.store.keys.events,), argument))

    # -- what the others send --------------------------------------------------------------

    def received(self, event: dict[str, Any]) -> None:
        """Another replica's open or close, into this book as a sibling worker's would be;
        its tools' annotations to `on_hints`. One that fails its checks is dropped, counted."""
        problem = event_problem(event, self.routes)
        if problem is not None:
            rejected("event", problem)
            return
        if event.get("op") == "hints":
            route, tools = event.get("route"), event.get("tools")
            if self.on_hints is not None and isinstance(route, str) and isinstance(tools, dict):
                self.on_hints(route, tools)
            return
        if event.get("op") == "close":
            self.book.apply(event)
            return
        entry = event.get("entry")
        if event.get("op") != "open" or not isinstance(entry, dict):
            return
        try:
            answered = local_time(float(entry["answered_wall_ms"]), self.book.clock)
            chain = local_time(float(entry["chain_wall_ms"]), self.book.clock)
            replica = {
                "key": str(entry["key"]),
                "identity": str(entry["identity"]),
                "request_id": str(entry["request_id"]),
                "route": str(entry["route"]),
                "code": str(entry["code"]),
                "rule": str(entry["rule"]),
                "retryable": bool(entry["retryable"]),
                "retry_after_ms": entry["retry_after_ms"],
                "answered_at": answered,
                "chain_started": answered if chain >= answered else chain,
                "origin": 0,  # another machine's: counted there, or by the store's sweep
            }
        except (KeyError, TypeError, ValueError):
            return
        self.book.apply({"op": "open", "entry": replica})

    # -- what the store granted this process: counted here -----------------------------------

    def _settled(self, result: object) -> None:
        """Failures the store settled with this open (its predecessor, its successor, or
        itself by a success heard of first), as (route, code, outcome) triples."""
        if isinstance(result, list) and len(result) % 3 == 0:
            for index in range(0, len(result), 3):
                route, code, outcome = result[index : index + 3]
                self._count(route, code, outcome)

    def _won(self, result: object) -> None:
        """A settlement the store granted this process: (route, code, outcome, recovery ms)."""
        if isinstance(result, list) and len(result) == 4:
            route, code, outcome, recovery_ms = result
            if self._count(route, code, outcome) and _is_number(recovery_ms):
                RECOVERY_SECONDS.labels(route=route, code=code).observe(float(recovery_ms) / 1000)

    def _abandoned(self, result: object) -> None:
        if isinstance(result, list) and len(result) % 2 == 0:
            for route, code in zip(result[0::2], result[1::2], strict=True):
                self._count(route, code, Outcome.ABANDONED.value)

    def _count(self, route: object, code: object, outcome: object) -> bool:
        """One settled failure in Prometheus, when its labels are this config's: the route
        and code come from keys anyone who can write to the store could have set."""
        problem = label_problem(route, code, self.routes)
        if problem is None and outcome not in OUTCOMES:
            problem = "bad_field"
        if problem is not None:
            rejected("tally", problem)
            return False
        count_followup(str(route), str(code), str(outcome))
        return True

    # -- the fleet's tables ----------------------------------------------------------------

    async def rows(self) -> list[dict[str, Any]]:
        """The fleet's unranked follow-up rows (gateway.feedback.followups.rank), or StoreDown."""
        keys = self.store.keys
        tally, rules = await self.store.bounded(_both(self.store, keys.tally, keys.rules))
        by_code: dict[tuple[str, str], dict[str, Any]] = {}
        for name, value in tally.items():
            route, _, rest = name.partition(SEP)
            code, _, field = rest.partition(SEP)
            problem = _tally_problem(route, code, field, value)
            if problem is None and (route, code) not in by_code and len(by_code) >= MAX_ROWS:
                problem = "oversized"
            if problem is not None:
                rejected("tally", problem)
                continue
            row = by_code.setdefault((route, code), _empty_row(route, code, rules))
            row[field] = row.get(field, 0) + int(value)
        pipe = self.store.redis.pipeline(transaction=False)
        for route, code in by_code:
            pipe.lrange(keys.recovery(route, code), 0, RECOVERY_SAMPLES - 1)
        samples = await self.store.bounded(pipe.execute()) if by_code else []
        for row, values in zip(by_code.values(), samples, strict=True):
            row["recovery_samples_ms"] = [float(v) for v in values if _is_number(v)]
        return list(by_code.values())

    async def gaps(self, limit: int, window_s: float) -> list[Gap]:
        """The fleet's top gaps inside the window, or StoreDown (gateway.feedback.fleet_gaps)."""
        return await fleet_gaps.top(self.store, self.gaps_clock(), limit, window_s)

    async def reset_gaps(self) -> None:
        """Every count of the fleet's gaps gone, or StoreDown."""
        await fleet_gaps.reset(self.store, self.gaps_clock())


async def _both(store: FleetStore, tally: str, rules: str) -> tuple[dict[str, str], dict[str, str]]:
    pipe = store.redis.pipeline(transaction=False)
    pipe.hgetall(tally)
    pipe.hgetall(rules)
    found, named = await pipe.execute()
    return dict(found), dict(named)


def _tally_problem(route: str, code: str, field: str, value: object) -> Reason | None:
    """Why one field of the store's tally is not shown: a row's route and code are of the
    config's shapes (routes renamed since stay: the tally is history), its count a number."""
    if not route_shaped(route) or label_problem(route, code, (route,)) is not None:
        return "bad_field"
    if field != "failures" and field not in OUTCOMES:
        return "bad_field"
    return None if isinstance(value, str) and value.isdigit() and len(value) <= 18 else "bad_field"


def _is_number(value: object) -> bool:
    """A number as Redis answers one (a string), or as a script returns it."""
    if isinstance(value, str) and len(value) <= 32:
        try:
            value = float(value)
        except ValueError:
            return False
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value >= 0


def _empty_row(route: str, code: str, rules: dict[str, str]) -> dict[str, Any]:
    return {
        "route": route,
        "code": code,
        "rule": rules.get(f"{route}{SEP}{code}{SEP}", ""),
        "failures": 0,
        **{o.value: 0 for o in Outcome},
        "recovery_samples_ms": [],
    }


def connect(
    loaded: LoadedConfig, book: FollowupBook, signatures: SignatureBook
) -> SharedTracking | None:
    """The books of a gateway with `fleet:` joined to its store; None without one. The store
    connects when `FleetStore.start` runs; until then (and while it is down) writes wait."""
    spec = loaded.config.fleet
    if spec is None:
        return None
    if loaded.fleet_keys is None:  # the loader reads fleet.key_file, or refuses the config
        raise RuntimeError("fleet: no key to seal what replicas share (fleet.key_file)")
    store = FleetStore(spec, loaded.fleet_password, SCRIPTS, loaded.fleet_keys)
    routes = frozenset(route.name for route in loaded.config.routes)
    shared = SharedTracking(store, book, signatures.capacity, routes)
    book.shared = shared
    signatures.shared, shared.gaps_clock = shared.gap, signatures.clock
    return shared
