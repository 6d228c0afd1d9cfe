"""The console's sign-in sessions (docs/security.md#console).

Signing in with a token of `admin_token_file` gives the browser a cookie holding a random
session value, never the token: cookies are not scoped to a port, so any service on the same
host under `/ui` (an upstream's page reached through the gateway's own port, say) receives
the cookie, and with the token in it would hold the admin listener's key. A session value
opens the console alone, on this listener alone, and:

- expires `LIFETIME_S` after sign-in, however active;
- ends when the token it was opened with is no longer in the token file (a rotation signs
  everyone out at the file's next re-read, within a second), and at sign-out;
- is one of at most `MAX_SESSIONS`, the oldest ended first, so sign-ins cannot grow memory.

Sessions live in the process that serves the admin listener: one process however many
workers serve traffic (under `serve --workers` the supervisor does), so a session is valid
whichever worker answers the gateway's traffic. A restart signs everyone out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.resolve.auth import TokenFile

LIFETIME_S = 8 * 3600.0
"""A working day: long enough not to interrupt one, short enough that a cookie copied off a
machine is of no use the next day."""
MAX_SESSIONS = 1024


@dataclass(frozen=True, slots=True)
class _Session:
    expires: float
    token: bytes
    """The SHA-256 of the token signed in with: checked against the file at each use."""


class ConsoleSessions:
    """Session values handed out at sign-in, and what each was opened with."""

    def __init__(
        self,
        tokens: TokenFile,
        lifetime_s: float = LIFETIME_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tokens = tokens
        self.lifetime_s = lifetime_s
        self.clock = clock
        self._open: OrderedDict[str, _Session] = OrderedDict()

    def open(self, token: str) -> str:
        """A new session for `token` (already checked by the caller); its cookie value."""
        value = secrets.token_urlsafe(32)
        self._open[value] = _Session(self.clock() + self.lifetime_s, _digest(token.encode()))
        while len(self._open) > MAX_SESSIONS:
            self._open.popitem(last=False)
        return value

    def valid(self, value: str | None) -> bool:
        """Whether `value` is a live session whose token the file still holds."""
        if not value:
            return False
        session = self._open.get(value)
        if session is None:
            return False
        current = [_digest(token) for token in self.tokens.tokens()]
        if self.clock() >= session.expires or not _among(session.token, current):
            del self._open[value]
            return False
        return True

    def close(self, value: str | None) -> None:
        if value:
            self._open.pop(value, None)

    def __len__(self) -> int:
        return len(self._open)


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def _among(digest: bytes, digests: list[bytes]) -> bool:
    found = False
    for candidate in digests:  # no early exit, as the token check
        found |= hmac.compare_digest(digest, candidate)
    return found


__all__ = ["LIFETIME_S", "MAX_SESSIONS", "ConsoleSessions"]
