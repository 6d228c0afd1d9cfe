"""What the remote resolver's client keeps between calls: its circuit breaker and its answer
cache, and the errors it raises.

Apart from the client (`remote.py`) so that the recovery service can name them without
importing aiohttp: a gateway with no `resolver.url` (every `mendpoint stdio` without one)
never imports the HTTP client, about 0.1 s of CPU on its start (docs/performance.md#mcp-start-up).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.resolve.wire import WireOption


class ResolverUnavailable(Exception):
    """The remote resolver could not give a valid answer (or its circuit is open)."""


class CircuitOpen(ResolverUnavailable):
    """The breaker is open: the resolver was not called at all."""


class Unsendable(Exception):
    """The request could not be written to the wire: the resolver was not called, and it
    is not the resolver's failure (the breaker counts nothing)."""


class CircuitBreaker:
    """Opens after `threshold` consecutive failures; after `cooldown_s` lets one call probe."""

    def __init__(self, threshold: int, cooldown_s: float) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.failures = 0
        self.opened_at: float | None = None

    def allow(self) -> bool:
        if self.opened_at is None:
            return True
        if time.monotonic() - self.opened_at >= self.cooldown_s:
            self.opened_at = time.monotonic()  # half-open: one probe per cool-down
            return True
        return False

    @property
    def open(self) -> bool:
        return self.opened_at is not None

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None

    def failure(self) -> None:
        self.failures += 1
        if self.failures >= self.threshold:
            self.opened_at = time.monotonic()


CacheKey = tuple[str, str, str, str, str]


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    options: tuple[WireOption, ...]
    expires: float


class TTLCache:
    """A small LRU with expiry: at most `size` entries, each valid for `ttl_s`."""

    def __init__(self, size: int, ttl_s: float) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self._entries: OrderedDict[CacheKey, CachedAnswer] = OrderedDict()

    def get(self, key: CacheKey) -> tuple[WireOption, ...] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires < time.monotonic():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry.options

    def put(self, key: CacheKey, options: tuple[WireOption, ...]) -> None:
        if self.size <= 0 or self.ttl_s <= 0:
            return
        self._entries[key] = CachedAnswer(options, time.monotonic() + self.ttl_s)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
