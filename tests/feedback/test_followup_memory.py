"""What open follow-up entries really cost, and the budget that holds them
(docs/operations.md#follow-ups).

A real `FollowupBook` is filled as the request path fills it: one failure per caller and
target, keyed by the same digests `proxy.followup_watch` makes, with request ids from the
gateway's own generator (or 200-character ones a caller chose), opened here or replicated
from a sibling worker over the JSON link, alone or as the second failure of a chain, with a
`retry_after_ms` per failure. tracemalloc measures what the entries hold. The book counts
each at `entry_bytes`: that must never be less than the truth (else `max_bytes` would not
hold) and not much more (else the figure in the docs would not be true).
"""

from __future__ import annotations

import gc
import json
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.config.models import FollowupsSpec
from gateway.exchange.context import fresh_request_id
from gateway.feedback.followups import Answered, Attempt, FollowupBook, digest
from gateway.feedback.target_filter import where_of
from gateway.telemetry.metrics import REGISTRY

ROUTE, CODE, RULE = "orders", "RATE_LIMITED", "http-429"
UNBOUNDED = FollowupsSpec(max_tracked=10_000_000, max_bytes=4 << 30)


@dataclass(frozen=True)
class Fill:
    replica: bool = False
    chain: bool = False
    long_ids: bool = False


FILLS = {
    "opened-here": Fill(),
    "replicated-from-a-sibling": Fill(replica=True),
    "second-failure-of-a-chain": Fill(chain=True),
    "200-character-request-ids": Fill(long_ids=True),
    "all-of-them": Fill(replica=True, chain=True, long_ids=True),
}


def request_id(long: bool) -> str:
    return (fresh_request_id() * 7)[:200] if long else fresh_request_id()


def fill(book: FollowupBook, count: int, how: Fill) -> None:
    """`count` failures of distinct callers, as the request path (and the link) open them."""
    sibling = FollowupBook(UNBOUNDED, origin=book.origin + 1)
    events: list[str] = []
    if how.replica:
        sibling.publish = lambda event: events.append(json.dumps(event))
    opener = sibling if how.replica else book
    for i in range(count):
        caller = f"peer:10.0.{i // 250}.{i % 250}\0agent/1.0"
        target = f"/v1/items/{i}"
        key = digest(caller, ROUTE, "GET", target)
        identity = digest(key, b"", "Authorization:[]", "Cookie:[]")
        attempt = Attempt(key, identity, ROUTE, time.monotonic(), where_of(ROUTE, "GET", target))
        answered = Answered(429, CODE, RULE, True, 1000 + i)
        followed = None
        if how.chain:
            opener.settle(attempt, answered, request_id(how.long_ids), None)
            followed = opener.pending(key)
        opener.settle(attempt, answered, request_id(how.long_ids), followed)
        for event in events:
            book.apply(json.loads(event))
        events.clear()


def measured(count: int, how: Fill) -> tuple[float, float]:
    """(bytes the entries hold by tracemalloc, bytes the book counts), per entry."""
    book = FollowupBook(UNBOUNDED, origin=4242)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fill(book, count, how)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(book._open) == count
    return held / count, book.held_bytes / count


@pytest.mark.parametrize("how", list(FILLS.values()), ids=list(FILLS))
def test_the_book_counts_what_an_entry_really_holds(how: Fill) -> None:
    """Before, the docs said about 300 bytes and nothing counted them: an entry held 450-560."""
    # Enough entries that the dict's growth steps and the book's fixed parts average out;
    # fewer through the JSON link, which tracemalloc makes slow.
    truth, counted = measured(2_000 if how.replica else 5_000, how)
    assert truth <= counted, f"an entry holds {truth:.0f} B but is counted at {counted:.0f}"
    assert truth >= 0.8 * counted, f"counted at {counted:.0f} B, holds only {truth:.0f}"


def evicted() -> float:
    return REGISTRY.get_sample_value("mendpoint_followups_evicted_total", {"route": ROUTE}) or 0.0


def test_max_bytes_holds_and_evicts_the_least_recent() -> None:
    budget = 1 << 20
    book = FollowupBook(FollowupsSpec(max_bytes=budget), origin=4242)
    before = evicted()
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        fill(book, 6_000, Fill())
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    kept = len(book._open)
    assert book.held_bytes <= budget and held <= budget, (book.held_bytes, held)
    assert 1_500 < kept < 6_000
    assert evicted() - before == 6_000 - kept
    newest = digest("peer:10.0.23.249\0agent/1.0", ROUTE, "GET", "/v1/items/5999")
    oldest = digest("peer:10.0.0.0\0agent/1.0", ROUTE, "GET", "/v1/items/0")
    assert book.pending(newest) is not None and book.pending(oldest) is None


def test_the_count_is_kept_through_settling_sweeping_and_reconfiguring() -> None:
    now = [1000.0]
    book = FollowupBook(FollowupsSpec(window_s=10), clock=lambda: now[0], origin=1)
    fill(book, 50, Fill())
    full = book.held_bytes
    assert full > 0
    key = next(iter(book._open))
    entry = book.pending(key)
    assert entry is not None
    book.settle(Attempt(key, entry.identity, ROUTE, now[0]), Answered(200), "r-ok", entry)
    assert book.held_bytes < full
    now[0] += 11
    assert book.sweep() == 49
    assert book.held_bytes == 0
    fill(book, 50, Fill())
    settings: dict[str, Any] = {"max_bytes": 64 << 10, "max_tracked": 10}
    book.configure(FollowupsSpec(**settings))
    assert len(book._open) == 10 and book.held_bytes < 64 << 10
    book.configure(FollowupsSpec(enabled=False))
    assert book.held_bytes == 0
