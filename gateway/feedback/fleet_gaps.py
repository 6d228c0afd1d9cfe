"""The fleet's gaps in the store (docs/operations.md#fleet): what a replica's `SignatureBook`
writes, the window /gaps reads, and its reset; the callers are gateway.feedback.shared.

A failure is one `gap` script call (gateway.feedback.fleet_scripts): the signature counted in
the space-saving table `{p}:gaps` and in its 5-second bucket's sorted set `{p}:gaps:b:<n>`
(expiring three hours and ten seconds after its last write), and the book's sample, when it
took one, kept in the hash `{p}:gaps:samples`. The bucket is the book's, from its wall clock,
so a write replayed after an outage lands where it happened. A window is one ZUNION over its
buckets (Redis 6.2 or later) and one HMGET for the top's samples. What is read back is
checked as every store row is: a member's route, status and text, and a sample that is not
one a book makes, are dropped and counted (`mendpoint_fleet_rejected_total{what=gap}`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from gateway.feedback.fleet_events import rejected, route_shaped
from gateway.feedback.signatures import (
    BUCKET_S,
    MAX_WINDOW_S,
    SLOTS,
    Gap,
    GapSample,
    Signature,
    bucket_of,
    rank_key,
    window_buckets,
)
from gateway.feedback.store import COUNTS_TTL_S, FleetStore, Keys, Operation

MAX_GAP_TEXT = 4096
MAX_GAP_STATUS = 32
"""A signature's status at most: `transport:connect_refused` and `mcp:reported_success`
are past 16, the bound that once dropped them from the fleet's table."""


def write(
    keys: Keys, capacity: int, signature: Signature, sample: GapSample | None, now: float
) -> Operation:
    """The store's write for one failure of `signature` at `now` (Unix seconds)."""
    member = json.dumps([signature.route, signature.status, signature.text])
    arguments: dict[str, Any] = {
        "member": member,
        "capacity": capacity,
        "counts_ttl_s": COUNTS_TTL_S,
        "bucket_ttl_s": MAX_WINDOW_S + 2 * BUCKET_S,
    }
    if sample is not None:
        arguments["sample"] = json.dumps(sample.record(), ensure_ascii=False)
    return Operation(
        "gap", (keys.gaps, keys.gap_samples, keys.gap_bucket(bucket_of(now))), arguments
    )


async def top(store: FleetStore, now: float, limit: int, window_s: float) -> list[Gap]:
    """The top `limit` gaps of the `window_s` seconds up to `now`, with their samples."""
    keys, redis = store.keys, store.redis
    last, count = bucket_of(now), window_buckets(window_s)
    buckets = [keys.gap_bucket(b) for b in range(last - count + 1, last + 1)]
    members = await store.bounded(redis.zunion(buckets, withscores=True))
    found: list[tuple[str, Gap]] = []
    for member, score in members:
        try:
            route, status, text = json.loads(member)
        except (TypeError, ValueError):
            rejected("gap", "malformed")
            continue
        if not (route_shaped(route) and isinstance(status, str) and len(status) <= MAX_GAP_STATUS):
            rejected("gap", "bad_field")
            continue
        if not isinstance(text, str) or len(text) > MAX_GAP_TEXT:
            rejected("gap", "oversized")
            continue
        found.append((member, Gap(Signature(route, status, text), int(score))))
    found.sort(key=lambda item: rank_key(item[1]))
    chosen = found[:limit]
    if not chosen:
        return []
    kept = await store.bounded(redis.hmget(keys.gap_samples, [m for m, _ in chosen]))
    return [
        replace(gap, sample=_sample_of(text)) for (_, gap), text in zip(chosen, kept, strict=True)
    ]


async def reset(store: FleetStore, now: float) -> None:
    """The table, the samples and every bucket a window up to `now` can reach, in one DEL."""
    keys = store.keys
    last = bucket_of(now)
    buckets = [keys.gap_bucket(b) for b in range(last - SLOTS, last + 2)]
    await store.bounded(store.redis.delete(keys.gaps, keys.gap_samples, *buckets))


def _sample_of(text: object) -> GapSample | None:
    """A sample read from the store, or None (one that is not a book's is counted)."""
    if text is None:
        return None
    try:
        sample = GapSample.from_record(json.loads(text) if isinstance(text, str) else None)
    except ValueError:
        sample = None
    if sample is None:
        rejected("gap", "malformed")
    return sample
