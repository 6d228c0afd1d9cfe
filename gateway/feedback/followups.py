"""Follow-ups: what a caller does after a failure, per route and code (docs/operations.md).

A failure F answered to caller C on route R for method M and target T opens an entry. C's next
request to R with the same M and T within the window is F's follow-up, and settles it with
exactly one `Outcome`; no follow-up within the window settles it as `abandoned`. A follow-up
that is itself a failure opens its own entry, which remembers when the chain began, so
`recovery_seconds` is the time from the first failure to the caller's first success.

Only digests are kept: `key` (caller, route, method, target) and `identity` (the key plus the
body bytes and the credential headers), never bodies, targets or credentials. The book is
bounded twice, by `max_tracked` entries and by `max_bytes` of memory, each entry counted at
what it really holds (`entry_bytes`, measured with tracemalloc by
tests/feedback/test_followup_memory.py); the least recent is evicted and counted.

The request path asks `watching(route)` first: one dictionary lookup while no failure is open
on the route, which is all the success path pays; while one is, `may_follow` (a counting filter
of the open failures' route, method and target: gateway.feedback.target_filter) before the
caller is identified for `pending`.

Under `serve --workers N` every worker keeps a replica of the open entries: `publish` sends
each open and each settlement to the supervisor, which passes it to the other workers
(`apply`), so a follow-up is matched whichever worker receives it. The worker that settles an
entry counts the outcome; the worker that opened it counts it abandoned; the supervisor's
figures are the sums.

With a fleet store (gateway.feedback.shared) other machines' entries arrive the same way,
checked, and the store decides what is counted; the book's own tallies are this process's
view, shown while the store is down (docs/operations.md#fleet).
"""

from __future__ import annotations

import hashlib
import statistics
import sys
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from gateway.config.models import FollowupsSpec
from gateway.feedback.target_filter import BLIND, TargetFilter
from gateway.telemetry.metrics import FOLLOWUPS_EVICTED, RECOVERY_SECONDS, count_followup

RECOVERY_SAMPLES = 1000  # per (route, code): enough for a stable median, bounded memory
MAX_ORIGINS = 1024
DIGEST_CHARS = 32
ENTRY_BYTES = 584
"""One open failure beyond its request id's characters (the `OpenFailure`, its two digests, the
id's string header, its numbers, its share of the ordered dict), measured with tracemalloc over
books of 500 to 90,000 entries, local or replicated, alone or second in a chain: 466 to 547
bytes, plus a margin (tests/feedback/test_followup_memory.py; docs/operations.md#follow-ups)."""


def entry_bytes(entry: OpenFailure) -> int:
    """The memory `entry` costs the book, never less than it holds: 616 bytes with the
    gateway's own 32-character request id, 784 with the longest a caller may send (200).
    Digests longer than ENTRY_BYTES measured count too: a replica's entry comes from another
    process (checked in gateway.feedback.fleet_events, not assumed here); route, code and
    rule are interned, one copy however many entries name them."""
    digests = len(entry.key) + len(entry.identity) - 2 * DIGEST_CHARS
    return ENTRY_BYTES + len(entry.request_id) + max(0, digests)


class Outcome(StrEnum):
    ABANDONED = "abandoned"
    RETRIED_UNCHANGED = "retried_unchanged"
    RETRIED_TOO_EARLY = "retried_too_early"
    RETRIED_AS_ADVISED = "retried_as_advised"
    RECOVERED = "recovered"
    FAILED_AGAIN_SAME_CODE = "failed_again_same_code"
    FAILED_DIFFERENTLY = "failed_differently"


WASTED = (Outcome.RETRIED_UNCHANGED, Outcome.RETRIED_TOO_EARLY)
OUTCOME_KEYS = tuple(o.value for o in Outcome)


def digest(*parts: bytes | str) -> str:
    """A short, collision-resistant name for a tuple of values (16 bytes of BLAKE2b)."""
    chunks = []
    for part in parts:
        data = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
        chunks.append(len(data).to_bytes(4, "big"))
        chunks.append(data)
    return hashlib.blake2b(b"".join(chunks), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Attempt:
    """One request as follow-up matching sees it."""

    key: str
    identity: str
    route: str
    started: float
    where: int = BLIND
    """`where_of` its route, method and target."""


@dataclass(frozen=True, slots=True)
class Answered:
    """How a request was answered: its status and, for a classified failure, the verdict."""

    status: int
    code: str | None = None
    rule: str | None = None
    retryable: bool = False
    retry_after_ms: int | None = None
    fix_required: bool = False
    """The failure told the caller what to fix (a `fix_required`)."""


@dataclass(frozen=True, slots=True)
class OpenFailure:
    key: str
    identity: str
    request_id: str
    route: str
    code: str
    rule: str
    retryable: bool
    retry_after_ms: int | None
    answered_at: float
    chain_started: float
    origin: int
    """The process that opened it: the one that counts it abandoned."""
    where: int = BLIND
    """Its `where_of` slot in the book that opened it; BLIND in a replica."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What the access log line of a follow-up says."""

    follows: str
    outcome: Outcome


@dataclass(slots=True)
class CodeStats:
    rule: str
    failures: int = 0
    with_fix: int = 0
    """Failures that carried a `fix_required`: a reading about acting on it needs one."""
    outcomes: Counter[str] = field(default_factory=Counter)
    recovery_ms: deque[float] = field(default_factory=lambda: deque(maxlen=RECOVERY_SAMPLES))


Publish = Callable[[dict[str, Any]], None]


class Shared(Protocol):
    """The fleet store's side of a book (gateway.feedback.shared.SharedTracking)."""

    def opened(self, entry: OpenFailure, started: float) -> None: ...

    def followed(
        self,
        attempt: Attempt,
        answered: Answered,
        entry: OpenFailure | None,
        outcome: Outcome | None,
    ) -> None: ...

    def sweep(self) -> None: ...


def decide(entry: OpenFailure, identical: bool, started: float, answered: Answered) -> Outcome:
    """The one outcome of `entry` given its follow-up (the table in docs/operations.md)."""
    if identical:
        if not entry.retryable:
            return Outcome.RETRIED_UNCHANGED
        if answered.status < 400:
            return Outcome.RETRIED_AS_ADVISED
        delay_s = (entry.retry_after_ms or 0) / 1000
        if started - entry.answered_at < delay_s:
            return Outcome.RETRIED_TOO_EARLY
        return Outcome.RETRIED_AS_ADVISED
    if answered.status < 400:
        return Outcome.RECOVERED
    if answered.code == entry.code:
        return Outcome.FAILED_AGAIN_SAME_CODE
    return Outcome.FAILED_DIFFERENTLY


class FollowupBook:
    """The open failures of one process (and their replicas from the others), and the tallies."""

    def __init__(
        self,
        settings: FollowupsSpec,
        *,
        clock: Callable[[], float] = time.monotonic,
        origin: int = 0,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.origin = origin
        self.publish: Publish | None = None
        self.shared: Shared | None = None
        self._open: OrderedDict[str, OpenFailure] = OrderedDict()
        self._bytes = 0
        """The sum of `entry_bytes` over `_open`, held under `settings.max_bytes`."""
        self._routes: Counter[str] = Counter()
        self._targets = TargetFilter()
        self._origins: dict[int, int] = {}
        """The siblings' pids, one int object each, shared by their replicated entries."""
        self._stats: dict[tuple[str, str], CodeStats] = {}

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def configure(self, settings: FollowupsSpec) -> None:
        """A reload: new window and bound apply from now on; off forgets what is open."""
        self.settings = settings
        if not settings.enabled:
            self._open.clear()
            self._routes.clear()
            self._targets = TargetFilter()
            self._bytes = 0
        self._evict_over_bounds()

    def watching(self, route: str) -> bool:
        """Whether any failure is open on `route`: the success path's only question."""
        return route in self._routes

    def may_follow(self, route: str, where: int) -> bool:
        """Whether a request in `where_of` slot `where` may follow an open failure on
        `route` (a watched one): False means it follows none, without asking `pending`."""
        return self._targets.may_follow(route, where)

    def pending(self, key: str) -> OpenFailure | None:
        entry = self._open.get(key)
        if entry is None or self.clock() - entry.answered_at > self.settings.window_s:
            return None
        return entry

    def settle(
        self, attempt: Attempt, answered: Answered, request_id: str, followed: OpenFailure | None
    ) -> Settled | None:
        """Close the failure `attempt` follows (if still open) and open one if it failed."""
        settled = None
        now = self.clock()
        if followed is not None and self._open.get(attempt.key) is followed:
            self._remove(attempt.key)
            outcome = decide(
                followed, attempt.identity == followed.identity, attempt.started, answered
            )
            recovery_s = max(0.0, now - followed.chain_started) if answered.status < 400 else None
            self._count(followed, outcome, recovery_s)
            if self.publish is not None:
                self.publish({"op": "close", "key": attempt.key, "request_id": followed.request_id})
            settled = Settled(followed.request_id, outcome)
            if self.shared is not None:
                self.shared.followed(attempt, answered, followed, outcome)
        elif self.shared is not None and answered.status < 400:
            self.shared.followed(attempt, answered, None, None)  # news may be on its way
        if answered.code is not None and answered.rule is not None:
            chain = followed.chain_started if settled is not None and followed else now
            entry = OpenFailure(
                key=attempt.key,
                identity=attempt.identity,
                request_id=request_id,
                route=attempt.route,
                code=answered.code,
                rule=answered.rule,
                retryable=answered.retryable,
                retry_after_ms=answered.retry_after_ms,
                answered_at=now,
                chain_started=chain,
                origin=self.origin,
                where=attempt.where,
            )
            stats = self._stats_for(entry)
            stats.failures += 1
            stats.with_fix += answered.fix_required
            self._insert(entry)
            if self.publish is not None:
                self.publish({"op": "open", "entry": asdict(entry)})
            if self.shared is not None:
                self.shared.opened(entry, attempt.started)
        return settled

    def sweep(self) -> int:
        """Settle every entry past the window as abandoned; returns how many were."""
        horizon = self.clock() - self.settings.window_s
        expired = [k for k, e in self._open.items() if e.answered_at < horizon]
        for key in expired:
            entry = self._remove(key)
            if entry.origin == self.origin:
                self._count(entry, Outcome.ABANDONED, None)
        if self.shared is not None:
            self.shared.sweep()  # the store counts the fleet's abandonments, each once
        return len(expired)

    def apply(self, event: dict[str, Any]) -> None:
        """An open or a settlement made by another worker (never re-published)."""
        if event.get("op") == "open" and isinstance(event.get("entry"), dict):
            try:
                entry = OpenFailure(**event["entry"])
            except TypeError:
                return
            # Decoded from JSON, each string is a new object; route, code and rule come from
            # the config, a small set: shared, they cost a replica what a local entry costs.
            if len(self._origins) > MAX_ORIGINS:  # restarted workers' pids: rarely many
                self._origins.clear()
            entry = replace(
                entry,
                route=sys.intern(entry.route),
                code=sys.intern(entry.code),
                rule=sys.intern(entry.rule),
                origin=self._origins.setdefault(entry.origin, entry.origin),
                where=BLIND,  # the sender's slot, by its own hash: unknown here
                # A failure that began its chain: one float, as where it was opened.
                chain_started=(
                    entry.answered_at
                    if entry.chain_started == entry.answered_at
                    else entry.chain_started
                ),
            )
            # Monotonic clocks are per machine, so the supervisor's workers share them.
            self._insert(entry)
        elif event.get("op") == "close" and isinstance(event.get("key"), str):
            entry_now = self._open.get(event["key"])
            if entry_now is not None and entry_now.request_id == event.get("request_id"):
                self._remove(event["key"])

    def table(self) -> list[dict[str, Any]]:
        """The /followups rows: wasted attempts first, then most failures."""
        self.sweep()
        return rank(self.rows())

    def rows(self) -> list[dict[str, Any]]:
        """Unranked rows with raw recovery samples, for merging across workers. `open`: its
        own failures still in their window (a replica's is its opener's): summed, each once."""
        still: Counter[tuple[str, str]] = Counter(
            (e.route, e.code) for e in self._open.values() if e.origin == self.origin
        )
        return [
            {
                "route": route,
                "code": code,
                "rule": stats.rule,
                "failures": stats.failures,
                "open": still[(route, code)],
                "with_fix_required": stats.with_fix,
                **{o.value: stats.outcomes[o.value] for o in Outcome},
                "recovery_samples_ms": list(stats.recovery_ms),
            }
            for (route, code), stats in self._stats.items()
        ]

    def _count(self, entry: OpenFailure, outcome: Outcome, recovery_s: float | None) -> None:
        """In this process's tallies; in Prometheus too, unless a fleet store counts it (and
        then Prometheus counts what the store grants: gateway.feedback.shared)."""
        stats = self._stats_for(entry)
        stats.outcomes[outcome.value] += 1
        if recovery_s is not None:
            stats.recovery_ms.append(recovery_s * 1000)
        if self.shared is not None:
            return  # the store counts it, once fleet-wide (gateway.feedback.shared)
        count_followup(entry.route, entry.code, outcome.value)
        if recovery_s is not None:
            RECOVERY_SECONDS.labels(route=entry.route, code=entry.code).observe(recovery_s)

    def _stats_for(self, entry: OpenFailure) -> CodeStats:
        stats = self._stats.get((entry.route, entry.code))
        if stats is None:
            stats = self._stats[(entry.route, entry.code)] = CodeStats(entry.rule)
        return stats

    def _insert(self, entry: OpenFailure) -> None:
        previous = self._open.pop(entry.key, None)
        if previous is not None:
            self._routes[previous.route] -= 1
            self._bytes -= entry_bytes(previous)
            self._targets.unplace(previous.route, previous.where)
        self._open[entry.key] = entry
        self._routes[entry.route] += 1
        self._targets.place(entry.route, entry.where)
        self._bytes += entry_bytes(entry)
        self._evict_over_bounds()

    def _remove(self, key: str) -> OpenFailure:
        entry = self._open.pop(key)
        self._bytes -= entry_bytes(entry)
        self._routes[entry.route] -= 1
        if self._routes[entry.route] <= 0:
            del self._routes[entry.route]
        self._targets.unplace(entry.route, entry.where)
        return entry

    @property
    def held_bytes(self) -> int:
        """What the open failures hold, by `entry_bytes`: at most `settings.max_bytes`."""
        return self._bytes

    def _evict_over_bounds(self) -> None:
        """The least recent out, counted, until both `max_tracked` and `max_bytes` hold."""
        count, budget = self.settings.max_tracked, self.settings.max_bytes
        while self._open and (len(self._open) > count or self._bytes > budget):
            key = next(iter(self._open))
            entry = self._remove(key)
            FOLLOWUPS_EVICTED.labels(route=entry.route).inc()


def rank(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as /followups shows them: the median recovery, sorted by wasted attempts. A row
    with no `open` (the fleet store's: it settles every failure once) gets the failures not
    settled yet."""
    shown = []
    for row in rows:
        samples = row.get("recovery_samples_ms", [])
        settled = sum(int(row.get(key, 0)) for key in OUTCOME_KEYS)
        shown.append(
            {
                **{k: v for k, v in row.items() if k != "recovery_samples_ms"},
                "open": row.get("open", max(0, int(row["failures"]) - settled)),
                "recovery_p50_ms": round(statistics.median(samples), 1) if samples else None,
            }
        )
    return sorted(shown, key=lambda r: (-wasted(r), -r["failures"], r["route"], r["code"]))


def merge(tables: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Sum the workers' unranked rows (samples pooled, bounded) into one table."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for rows in tables:
        for row in rows:
            slot = merged.setdefault(
                (row["route"], row["code"]),
                {"route": row["route"], "code": row["code"], "rule": row["rule"], "failures": 0}
                | {key: 0 for key in OUTCOME_KEYS}
                | {"recovery_samples_ms": []},
            )
            for counted in ("failures", "open", "with_fix_required", *OUTCOME_KEYS):
                if counted in row:
                    slot[counted] = slot.get(counted, 0) + row[counted]
            slot["recovery_samples_ms"].extend(row.get("recovery_samples_ms", []))
    for slot in merged.values():
        slot["recovery_samples_ms"] = slot["recovery_samples_ms"][-RECOVERY_SAMPLES:]
    return rank(merged.values())


def wasted(row: dict[str, Any]) -> int:
    return sum(int(row.get(o.value, 0)) for o in WASTED)
