"""Which requests could follow an open failure, answered without identifying the caller.

A follow-up has its failure's route, method and target (gateway.feedback.followups), so a
request to any other target of a route with failures open follows none of them. The book keeps
a counting filter of its own open failures' (route, method, target) hashes (`where_of`: this
process's `hash`, masked to a slot): a success whose slot is empty costs a tuple hash and a byte
read, where identifying its caller and digesting its key cost tens of microseconds
(docs/performance.md#follow-ups-while-a-failure-is-open). The counters are bytes: a slot that
reaches 255 stays there (asked, never missed). A replica, a failure another process opened,
carries no slot this process can compute, so while one is open on a route every request on it
is asked.
"""

from __future__ import annotations

from collections import Counter

SLOTS = 1 << 16
"""64 KiB of counters a book, however many failures are open."""
BLIND = -1
"""The slot of a failure this process cannot know it for (a replica from another process)."""
FULL = 255


def where_of(route: str, method: str, target: str) -> int:
    """The slot of a (route, method, target): a follow-up's is its failure's."""
    return hash((route, method, target)) & (SLOTS - 1)


class TargetFilter:
    """The slots of one book's open failures, and its routes with replicas open."""

    def __init__(self) -> None:
        self._slots = bytearray(SLOTS)
        self._blind: Counter[str] = Counter()

    def may_follow(self, route: str, where: int) -> bool:
        """False: a request in slot `where` on `route` follows no open failure."""
        return self._slots[where] > 0 or route in self._blind

    def place(self, route: str, where: int) -> None:
        if where == BLIND:
            self._blind[route] += 1
        elif self._slots[where] < FULL:
            self._slots[where] += 1

    def unplace(self, route: str, where: int) -> None:
        if where == BLIND:
            self._blind[route] -= 1
            if self._blind[route] <= 0:
                del self._blind[route]
        elif 0 < self._slots[where] < FULL:
            self._slots[where] -= 1
