"""The fleet store: one process's connection to the Redis its replicas share
(docs/operations.md#fleet).

Nothing here runs on a request's critical path. The request path appends an `Operation` (a
Lua script's keys and arguments, gateway.feedback.shared) to a bounded queue and returns; one
task per process sends the queue in batches of up to `BATCH`, each one EVALSHA of the batch
script, bounded by `fleet.timeout_ms`, then one PUBLISH of the events the batch made, sealed
with the fleet key here (the key never reaches Redis). Another task holds the subscription to
the events channel (one message a batch, gateway.feedback.fleet_scripts) and hands each event
of another process to a callback, once its seal is checked (gateway.feedback.fleet_events).

When Redis is slow or gone, a call past the timeout marks the store down: the request path
is never touched; the queue keeps what it cannot send (at most `fleet.queue_max`, the oldest
dropped and counted); `mendpoint_fleet_store_up` reads 0 and
`mendpoint_fleet_store_degraded_total` counts the outage; a warning is logged once a minute;
a ping every second finds the store again, and then the queue is replayed in order and the
subscription restored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.config.fleet_model import FleetSpec
from gateway.config.session_keys import SessionKeys
from gateway.feedback.fleet_events import (
    MAX_EVENTS,
    MAX_MESSAGE_CHARS,
    Rejected,
    rejected,
    seal,
    unseal,
)
from gateway.feedback.fleet_scripts import batch_script
from gateway.telemetry.metrics import STORE_DEGRADED, STORE_DROPPED, STORE_UP

log = logging.getLogger("mendpoint.fleet")

BATCH = 128
"""Operations per batch: one command and one round trip for a burst of failures."""
PROBE_S = 1.0
WARN_EVERY_S = 60.0
KEY_MARGIN_MS = 600_000
"""An open failure's key outlives its deadline by this, so the sweep that counts it abandoned
finds it even when Redis was unreachable at the deadline."""
COUNTS_TTL_S = 30 * 86_400
"""Tallies and gaps are kept a month past their last change: a fleet taken down leaves no
keys in a shared Redis for ever."""
RECOVERY_SAMPLES = 1000
SWEEP_LIMIT = 1000
SEP = "\x1f"


class StoreDown(Exception):
    """The store did not answer within `fleet.timeout_ms`; the caller answers per process."""


Done = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class Operation:
    """One script call waiting to be sent, and what to do with its result. `argument` is
    encoded when its batch is (JSON: strings, numbers, booleans, None, lists, dicts), not
    on the request path."""

    script: str
    keys: tuple[str, ...]
    argument: dict[str, Any]
    done: Done | None = None


class Keys:
    """Every key under one hash tag, `{prefix}`: one slot, so a Redis Cluster serves it too."""

    def __init__(self, prefix: str) -> None:
        base = "{" + prefix + "}"
        self.open_prefix = f"{base}:fu:open:"
        self.due = f"{base}:fu:due"
        self.tally = f"{base}:fu:tally"
        self.rules = f"{base}:fu:rules"
        self.recovery_prefix = f"{base}:fu:recovery:"
        self.events = f"{base}:fu:events"
        self.gaps = f"{base}:gaps"
        self.gap_samples = f"{base}:gaps:samples"
        self.gap_bucket_prefix = f"{base}:gaps:b:"
        self.relay_prefix = f"{base}:relay:"

    def open(self, key: str) -> str:
        return self.open_prefix + key

    def succeeded(self, key: str) -> str:
        return f"{self.open_prefix[: -len('open:')]}ok:{key}"

    def gap_bucket(self, bucket: int) -> str:
        """The sorted set of one time bucket's gaps (gateway.feedback.signatures.bucket_of)."""
        return f"{self.gap_bucket_prefix}{bucket}"

    def relay(self, replica: str) -> str:
        """Where `replica`'s internal relay port is (gateway.mcp.bridge_replicas)."""
        return self.relay_prefix + replica

    def recovery(self, route: str, code: str) -> str:
        return f"{self.recovery_prefix}{route}{SEP}{code}"


def describe(url: str) -> str:
    """The store's address as logs and /followups name it (the URL holds no password)."""
    return url


class FleetStore:
    """One process's connection to the shared store, its queue, and its health."""

    def __init__(
        self,
        spec: FleetSpec,
        password: str | None,
        scripts: dict[str, str],
        keys: SessionKeys,
    ) -> None:
        import redis.asyncio as aioredis  # the `fleet` extra: only a gateway with a store needs it

        self.spec = spec
        self.sealing = keys
        """The fleet key's: what seals the events and relay records this process writes."""
        self.keys = Keys(spec.key_prefix)
        self.replica = secrets.token_hex(8)
        """This process's name on the events channel: its own events are not applied again."""
        self.timeout_s = spec.timeout_ms / 1000
        self.up = False
        self.subscribed = False
        """Whether the others' events reach this process now (they are not kept for later)."""
        self._redis = aioredis.Redis.from_url(
            spec.redis,
            password=password,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=self.timeout_s,
            health_check_interval=0,
            decode_responses=True,
            **tls_arguments(spec),
        )
        self._batch_text = batch_script(scripts)
        self._batch_sha = sha1_of(self._batch_text)
        self._queue: deque[Operation] = deque()
        self._in_flight = 0
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._down_since: float | None = None
        self._warned_at = 0.0
        self._on_event: Callable[[dict[str, Any]], None] | None = None
        STORE_UP.set(0)

    # -- the request path's side: append and return --------------------------------------

    def enqueue(self, operation: Operation) -> None:
        if len(self._queue) >= self.spec.queue_max:
            self._queue.popleft()
            STORE_DROPPED.inc()
        self._queue.append(operation)
        self._wake.set()

    @property
    def redis(self) -> Any:
        """The client, for reads made through `bounded`."""
        return self._redis

    @property
    def waiting(self) -> int:
        """Writes not yet acknowledged by the store: queued, or sent and unanswered."""
        return len(self._queue) + self._in_flight

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        """Connect (without waiting for success: a store down at start is a store down)."""
        self._on_event = on_event
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._send_loop()), loop.create_task(self._listen_loop())]

    async def close(self) -> None:
        """Send what is queued, if the store answers within the timeout; then disconnect."""
        if self.up and self._queue:
            with contextlib.suppress(StoreDown):
                await self._flush_once()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._redis.aclose()

    # -- sending ---------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        while True:
            if not self.up:
                await self._probe()
                continue
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue  # something to send, or the store went down meanwhile
            try:
                await self._flush_once()
            except StoreDown as exc:
                self._went_down(str(exc))

    async def _flush_once(self) -> None:
        batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
        if not batch:
            return
        self._in_flight = len(batch)
        try:
            results = await self._run(batch)
        except StoreDown:
            self._queue.extendleft(reversed(batch))  # replayed in order when the store returns
            while len(self._queue) > self.spec.queue_max:
                self._queue.pop()
                STORE_DROPPED.inc()
            raise
        finally:
            self._in_flight = 0
        for operation, result in zip(batch, results, strict=True):
            if operation.done is not None and not isinstance(result, Exception):
                operation.done(result)

    async def _run(self, batch: list[Operation]) -> list[Any]:
        """One EVALSHA of the batch script for the whole batch (gateway.feedback.fleet_scripts
        .batch_script); a server without it (a restarted Redis) has it loaded and the call
        sent again, once, within the same bound. Keys go once each, named by their place:
        redis-py packs a command's arguments one by one on the event loop, and five of an
        operation's keys are the same for every operation."""
        keys: list[str] = []
        slots: dict[str, int] = {}
        plan: list[list[Any]] = []
        for operation in batch:
            named = []
            for key in operation.keys:  # each key once: most are every operation's
                slot = slots.get(key)
                if slot is None:
                    keys.append(key)
                    slot = slots[key] = len(keys)
                named.append(slot)
            plan.append([operation.script, named, operation.argument])
        raw = await self.bounded(self._batch(keys, json.dumps(plan, default=str)))
        answered, messages = _answer_and_messages(raw)
        await self._publish(messages)
        if not isinstance(answered, list) or len(answered) != len(batch):
            answered = [{"err": f"unreadable answer {str(raw)[:80]!r}"}] * len(batch)
        results: list[Any] = []
        for operation, result in zip(batch, answered, strict=True):
            if isinstance(result, dict) and set(result) == {"err"}:
                log.error("fleet store: %s failed: %s", operation.script, result["err"])
                result = RuntimeError(str(result["err"]))
            results.append(result)
        return results

    async def _publish(self, messages: list[Any]) -> None:
        """The batch's events, sealed, for the other replicas. Not replayed when the store
        fails now: the writes landed, and a replica that misses an event matches in the store
        instead (gateway.feedback.shared)."""
        pipe = self._redis.pipeline(transaction=False)
        for message in messages:
            if isinstance(message, list) and len(message) == 2:
                channel, text = message
                pipe.publish(str(channel), seal(self.sealing, "events", str(text)))
        if len(pipe):
            with contextlib.suppress(StoreDown):  # `bounded` marks the store down
                await self.bounded(pipe.execute())

    async def _batch(self, keys: list[str], plan: str) -> Any:
        from redis.exceptions import NoScriptError

        try:
            return await self._redis.evalsha(self._batch_sha, len(keys), *keys, plan)
        except NoScriptError:
            await self._redis.script_load(self._batch_text)
            return await self._redis.evalsha(self._batch_sha, len(keys), *keys, plan)

    async def bounded(self, call: Any) -> Any:
        """One store call within the timeout, or StoreDown (the store is then marked down)."""
        from redis.exceptions import RedisError

        try:
            return await asyncio.wait_for(call, self.timeout_s)
        except (TimeoutError, RedisError, OSError) as exc:
            reason = type(exc).__name__ + (f": {exc}" if str(exc) else "")
            if self.up:
                self._went_down(reason)
            raise StoreDown(reason) from None

    # -- health ----------------------------------------------------------------------------

    def _went_down(self, reason: str) -> None:
        if self.up or self._down_since is None:
            STORE_DEGRADED.inc()
            self._down_since = time.monotonic()
            self._warned_at = 0.0
        self.up = False
        STORE_UP.set(0)
        self._wake.set()  # the sender, idle with nothing to send, starts probing
        self._warn(reason)

    def _warn(self, reason: str) -> None:
        now = time.monotonic()
        if now - self._warned_at < WARN_EVERY_S:
            return
        self._warned_at = now
        since = now - (self._down_since or now)
        log.warning(
            "fleet store %s unreachable for %.0f s (%s): follow-ups and gaps are per process "
            "until it returns; %d writes waiting (docs/operations.md#fleet)",
            describe(self.spec.redis),
            since,
            reason,
            len(self._queue),
        )

    async def _probe(self) -> None:
        from redis.exceptions import RedisError

        try:
            await asyncio.wait_for(self._redis.ping(), self.timeout_s)
        except (TimeoutError, RedisError, OSError) as exc:
            if self._down_since is None:  # down from the start
                self._went_down(type(exc).__name__)
            else:
                self._warn(type(exc).__name__)
            await asyncio.sleep(PROBE_S)
            return
        if self._down_since is not None:
            log.warning(
                "fleet store %s answers again after %.0f s: shared follow-ups and gaps resume; "
                "replaying %d writes",
                describe(self.spec.redis),
                time.monotonic() - self._down_since,
                len(self._queue),
            )
        else:
            log.info("fleet store %s connected", describe(self.spec.redis))
        self._down_since = None
        self.up = True
        STORE_UP.set(1)
        self._wake.set()

    # -- the events channel ----------------------------------------------------------------

    async def _listen_loop(self) -> None:
        """The others' opens and closes, applied to this process's book as they come."""
        while True:
            if not self.up:
                await asyncio.sleep(PROBE_S / 4)
                continue
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await asyncio.wait_for(pubsub.subscribe(self.keys.events), self.timeout_s)
                self.subscribed = True
                while self.up:
                    message = await pubsub.get_message(timeout=PROBE_S)
                    if message is not None and message.get("type") == "message":
                        self._deliver(message.get("data"))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a dropped connection: the prober finds the store again
                if self.up:
                    self._went_down(type(exc).__name__)
            finally:
                self.subscribed = False
                closing: Callable[[], Awaitable[None]] = pubsub.aclose  # unannotated in redis-py
                with contextlib.suppress(Exception):
                    await closing()

    def _deliver(self, data: object) -> None:
        """One batch's events, in order, after its sender's id, once its seal is checked
        (what no replica of this fleet sealed is dropped unread, counted); this process's own
        batches are dropped unread (it has their events), and its own events in a batch for
        every replica too. Each event is checked field by field where it is applied
        (gateway.feedback.shared)."""
        if not isinstance(data, str) or self._on_event is None:
            return
        if len(data) > MAX_MESSAGE_CHARS:
            rejected("event", "oversized")
            return
        try:
            opened = unseal(self.sealing, "events", data)
        except Rejected as why:
            rejected("event", why.reason)
            return
        sender, _, body = opened.partition(SEP)
        if sender == self.replica:
            return
        try:
            events = json.loads(body)
        except ValueError:
            events = None
        if not isinstance(events, list) or len(events) > MAX_EVENTS:
            rejected("event", "malformed")
            return
        for event in events:
            if isinstance(event, dict) and event.get("from") != self.replica:
                self._on_event(event)


def _answer_and_messages(raw: object) -> tuple[Any, list[Any]]:
    """The batch script's answer: its results, and the messages it left for the gateway to
    seal and publish (cjson writes an empty list as `{}`)."""
    try:
        answered = json.loads(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None, []
    if not isinstance(answered, list) or len(answered) != 2:
        return None, []
    results, messages = answered
    return (
        [] if results == {} else results,
        messages if isinstance(messages, list) else [],
    )


def sha1_of(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # the name Redis gives a script


def tls_arguments(spec: FleetSpec) -> dict[str, Any]:
    """redis-py's TLS keywords from `fleet.tls` (a route's `tls:` block, gateway.config.tls)."""
    tls = spec.tls
    if tls is None:
        return {}
    arguments: dict[str, Any] = {}
    if tls.ca_file is not None:
        arguments["ssl_ca_certs"] = tls.ca_file
    if tls.cert_file is not None:
        arguments["ssl_certfile"] = tls.cert_file
    if tls.key_file is not None:
        arguments["ssl_keyfile"] = tls.key_file
    if tls.insecure:
        arguments["ssl_cert_reqs"] = "none"
        arguments["ssl_check_hostname"] = False
    return arguments
