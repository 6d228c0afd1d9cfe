"""Where each replica's internal relay port is: owner records in the fleet store, with a
heartbeat (docs/mcp.md#replicas).

Every process of a replica with `fleet.sessions` writes the replica's record,
`{prefix}:relay:<replica tag>` → the `HOST:PORT` other replicas reach its internal port at,
every `HEARTBEAT_S`, to expire `RECORD_TTL_S` later. A replica that dies or hangs stops
renewing it, so within `RECORD_TTL_S` the others find no record and answer its sessions' ids
with 404 at once, and a relay already waiting on it gives up (`alive`). A record is read
once per `HEARTBEAT_S` per replica at most (kept in between), and while the store does not
answer the last address read is used: a relay to a replica that is gone then fails to
connect, which is a 404 too. Every store call is bounded by `fleet.timeout_ms`
(`FleetStore.bounded`).

A record is sealed with the fleet key over its own key and address
(gateway.feedback.fleet_events.seal): one that is not, or that was copied from another
replica's key, is no record (counted in `mendpoint_fleet_rejected_total{what="relay_record"}`),
so whoever can write to the Redis cannot point a replica's sessions at an address of theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.feedback.fleet_events import Rejected, rejected, seal, unseal
from gateway.feedback.store import FleetStore, StoreDown

log = logging.getLogger("mendpoint.mcp")

HEARTBEAT_S = 1.0
RECORD_TTL_S = 5.0
"""A record outlives its last renewal by this: five heartbeats, so a replica whose loop
stalls for a moment (a loaded machine) is not taken for gone."""
MAX_KNOWN = 1024


class ReplicaDirectory:
    """This replica's owner record, renewed, and the other replicas' looked up."""

    def __init__(self, store: FleetStore, replica: str) -> None:
        self.store = store
        self.replica = replica
        self.address: str | None = None
        """Where other replicas reach this one's internal port (set when it listens)."""
        self._known: dict[str, tuple[str, float]] = {}
        self._task: asyncio.Task[None] | None = None

    def record_key(self, replica: str) -> str:
        return self.store.keys.relay(replica)

    def start(self, address: str) -> None:
        """Announce `address` as this replica's relay port, from now until `close`."""
        self.address = address
        self._task = asyncio.get_running_loop().create_task(self._heartbeat())

    async def _heartbeat(self) -> None:
        key, ttl_ms = self.record_key(self.replica), int(RECORD_TTL_S * 1000)
        while True:
            record = seal(self.store.sealing, f"relay {key}", self.address or "")
            with contextlib.suppress(StoreDown):  # the store counts and logs its outage
                await self.store.bounded(self.store.redis.set(key, record, px=ttl_ms))
            await asyncio.sleep(HEARTBEAT_S)

    async def address_of(self, replica: str) -> str | None:
        """Where `replica`'s relay port is, or None when it has no live record."""
        now = time.monotonic()
        known = self._known.get(replica)
        if known is not None and now - known[1] < HEARTBEAT_S:
            return known[0]
        key = self.record_key(replica)
        try:
            found = await self.store.bounded(self.store.redis.get(key))
        except StoreDown:
            return known[0] if known is not None else None
        found = self._opened(key, found)
        if found is None:
            self._known.pop(replica, None)
            return None
        if len(self._known) >= MAX_KNOWN:
            self._known.pop(next(iter(self._known)))
        self._known[replica] = (found, now)
        return found

    def _opened(self, key: str, record: object) -> str | None:
        """The address a record under `key` holds, if a replica of this fleet sealed it there.
        No age bound: a record lives `RECORD_TTL_S`, and machines' clocks may differ by more."""
        if not isinstance(record, str) or not record:
            return None
        try:
            address = unseal(self.store.sealing, f"relay {key}", record, max_age_ms=None)
        except Rejected as why:
            rejected("relay_record", why.reason)
            return None
        return address or None

    async def alive(self, replica: str) -> bool:
        return await self.address_of(replica) is not None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


__all__ = ["HEARTBEAT_S", "RECORD_TTL_S", "ReplicaDirectory"]
