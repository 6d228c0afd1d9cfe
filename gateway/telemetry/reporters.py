"""Log lines that must not flood: catalog gaps and spoofed identity claims, each once.

They log under the names of the packages whose events they report (`mendpoint.resolve`,
`mendpoint.callers`), so an operator filters them where they belong, but live here beside
the counters they move, bounded so a flood of distinct values cannot grow them.
"""

from __future__ import annotations

import logging
import time

from gateway.telemetry.metrics import (
    AMBIGUOUS_IDENTITY,
    CATALOG_GAPS,
    UNTRUSTED_IDENTITY,
    IdentitySource,
)

log = logging.getLogger("mendpoint.resolve")
identity_log = logging.getLogger("mendpoint.callers")

MAX_GAP_INTENTS = 500


class GapReporter:
    """Counts every catalog gap and logs each intent at most once per `interval_s`.

    At most `MAX_GAP_INTENTS` distinct intents get their own label; the rest share "other",
    so a resolver server fed arbitrary intents cannot grow the metric without bound.
    """

    def __init__(self, interval_s: float = 300.0) -> None:
        self._interval_s = interval_s
        self._last_logged: dict[str, float] = {}

    def report(self, intent: str) -> None:
        if intent not in self._last_logged and len(self._last_logged) >= MAX_GAP_INTENTS:
            CATALOG_GAPS.labels(intent="other").inc()
            return
        CATALOG_GAPS.labels(intent=intent).inc()
        now = time.monotonic()
        last = self._last_logged.get(intent)
        if last is None or now - last >= self._interval_s:
            self._last_logged[intent] = now
            log.warning("catalog gap: no skill declares recovery intent %r", intent)


MAX_REPORTED_PEERS = 4096


class SpoofReporter:
    """Counts identity claims the gateway did not believe; logs each peer once per interval.

    Two kinds: caller headers from a peer outside `trusted_proxies` (`untrusted`), and an
    identity sent twice, so that which one counts would be a guess (`ambiguous`). A client
    probing with either would otherwise fill the log one line per request. At most
    `MAX_REPORTED_PEERS` peers are remembered per kind; past that, entries older than the
    interval are forgotten, and if none are, the peer is counted but not logged.
    """

    def __init__(self, interval_s: float = 60.0) -> None:
        self._interval_s = interval_s
        self._last_logged: dict[str, float] = {}

    def report(self, peer: str | None, header: str) -> None:
        UNTRUSTED_IDENTITY.inc()
        key = peer or "unknown"
        if self._due(key):
            identity_log.warning(
                "ignored %s from %s: it is not in trusted_proxies, so the caller is anonymous "
                "(logged once per peer per %.0f s; see docs/security.md)",
                header,
                key,
                self._interval_s,
            )

    def ambiguous(self, peer: str | None, header: str, source: IdentitySource) -> None:
        AMBIGUOUS_IDENTITY.labels(source=source).inc()
        key = peer or "unknown"
        if self._due("ambiguous " + key):
            identity_log.warning(
                "%s came more than once (or with a comma in a name) from %s: which one is "
                "meant is a guess, so the caller is anonymous (logged once per peer per %.0f "
                "s; see docs/security.md)",
                header,
                key,
                self._interval_s,
            )

    def _due(self, key: str) -> bool:
        """True when `key` was not logged within the interval (and is remembered now)."""
        now = time.monotonic()
        last = self._last_logged.get(key)
        if last is not None and now - last < self._interval_s:
            return False
        if last is None and len(self._last_logged) >= MAX_REPORTED_PEERS:
            cutoff = now - self._interval_s
            self._last_logged = {p: t for p, t in self._last_logged.items() if t > cutoff}
            if len(self._last_logged) >= MAX_REPORTED_PEERS:
                return False
        self._last_logged[key] = now
        return True
