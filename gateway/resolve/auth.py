"""`mendpoint resolver --token-file`: only a gateway holding the shared token is answered.
(The admin listener checks its `admin_token_file` with the same `TokenFile`.)

The resolver answers with every skill the scopes in the request allow, and the request names
those scopes, so anyone who can reach it unauthenticated can read the whole catalog. Each
`POST /v1/resolve` must carry `Authorization: Bearer TOKEN`; a missing or wrong token gets 401
and is counted in `mendpoint_resolver_auth_failures_total{reason}`. Tokens are compared with
`hmac.compare_digest`, against every accepted token, so the time taken says nothing about
how much of a guess was right. The token file is read again when it changes (a rotated
Kubernetes Secret), at most once a second (docs/security.md#resolver-authentication).
"""

from __future__ import annotations

import hmac
import logging
import os
import time

from gateway.config.secrets import TokenError, read_tokens
from gateway.telemetry.metrics import RESOLVER_AUTH_FAILURES

log = logging.getLogger("mendpoint.resolver")
RECHECK_S = 1.0
SCHEME = "bearer"


def _mark(path: str) -> tuple[int, int, int]:
    try:
        stat = os.stat(path)
    except OSError:
        return (-1, -1, -1)
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


class TokenFile:
    """The tokens a listener accepts, kept in step with the file that holds them: the
    resolver's (`--token-file`) and the gateway's admin listener's (`admin_token_file`,
    gateway.serve.admin).

    A file that becomes unreadable or invalid keeps the tokens last read (and says so), so a
    half-written update never locks every gateway (or every scraper) out.
    """

    def __init__(self, path: str, *, name: str = "resolver token file") -> None:
        self.path = path
        self.name = name
        self._mark = _mark(path)
        self._tokens = self._encode(read_tokens(path))
        self._checked = time.monotonic()

    @staticmethod
    def _encode(tokens: tuple[str, ...]) -> tuple[bytes, ...]:
        return tuple(token.encode("ascii") for token in tokens)

    def tokens(self) -> tuple[bytes, ...]:
        now = time.monotonic()
        if now - self._checked >= RECHECK_S:
            self._checked = now
            mark = _mark(self.path)
            if mark != self._mark:
                self._mark = mark
                try:
                    self._tokens = self._encode(read_tokens(self.path))
                    log.info("%s %s changed; tokens re-read", self.name, self.path)
                except TokenError as exc:
                    log.error("%s unusable, keeping the last tokens: %s", self.name, exc)
        return self._tokens

    def check(self, authorization: str | None) -> str | None:
        """None when `authorization` carries an accepted token, else the refusal's reason."""
        if not authorization:
            return "missing"
        scheme, _, presented = authorization.strip().partition(" ")
        if scheme.lower() != SCHEME or not presented.strip():
            return "missing"
        candidate = presented.strip().encode("utf-8", "surrogateescape")
        accepted = False
        for token in self.tokens():  # no early exit: every token is compared every time
            accepted |= hmac.compare_digest(candidate, token)
        return None if accepted else "wrong"


def refused(reason: str) -> None:
    """Count one 401; the reason is a closed label (`missing` or `wrong`)."""
    RESOLVER_AUTH_FAILURES.labels(reason=reason).inc()
