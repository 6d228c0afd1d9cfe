"""Who is calling, and with which scopes (docs/recovery.md).

Identity comes from one configured source: an API-key header looked up by its SHA-256 (the
config holds only hashes), or a trusted header that an auth layer in front has set. An unknown
caller has no scopes. The key itself is hashed on arrival and never stored, logged or sent on.

A trusted header is believed only from a peer in `trusted_proxies` (gateway.config.trust): a client
that reaches the gateway directly could otherwise name itself and grant itself scopes. From
any other peer the caller is anonymous, and the attempt is counted and logged
(`SpoofReporter`; docs/security.md). An identity header that comes twice is ambiguous, from
any peer: the caller is anonymous, and that too is counted and logged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from multidict import MultiMapping

from gateway.config.models import CallersSpec
from gateway.telemetry.reporters import SpoofReporter


@dataclass(frozen=True, slots=True)
class Caller:
    name: str | None
    scopes: frozenset[str]

    @property
    def known(self) -> bool:
        return self.name is not None


ANONYMOUS = Caller(None, frozenset())


@dataclass(frozen=True, slots=True)
class CallerDirectory:
    source: str
    header: str
    by_digest: Mapping[str, Caller]
    principals: Mapping[str, Caller]
    scopes_header: str | None = None
    spoofs: SpoofReporter = field(default_factory=SpoofReporter, compare=False, repr=False)

    @classmethod
    def build(cls, spec: CallersSpec | None) -> CallerDirectory:
        if spec is None:
            return cls("none", "", {}, {})
        by_digest = {
            key.key.removeprefix("sha256:"): Caller(key.name, frozenset(key.scopes))
            for key in spec.keys
        }
        by_name = {p.name: Caller(p.name, frozenset(p.scopes)) for p in spec.principals}
        return cls(spec.source, spec.header, by_digest, by_name, spec.scopes_header)

    def by_name(self, name: str) -> Caller | None:
        """A configured caller by name (for `mendpoint explain --caller`)."""
        for caller in (*self.by_digest.values(), *self.principals.values()):
            if caller.name == name:
                return caller
        return None

    def identify(
        self, headers: MultiMapping[str], *, peer: str | None = None, trusted: bool = False
    ) -> Caller:
        """The caller of a request; `trusted` says its peer is in `trusted_proxies`."""
        if self.source == "none":
            return ANONYMOUS
        if self.source == "api_key":
            keys = headers.getall(self.header, ())
            if len(keys) > 1:
                self.spoofs.ambiguous(peer, self.header, "api_key")
                return ANONYMOUS
            return self.by_digest.get(key_digest(keys[0]), ANONYMOUS) if keys else ANONYMOUS
        if not trusted:
            sent = [h for h in (self.header, self.scopes_header) if h and h in headers]
            if sent:
                self.spoofs.report(peer, " and ".join(sent))
            return ANONYMOUS
        return self._trusted_caller(headers, peer)

    def _trusted_caller(self, headers: MultiMapping[str], peer: str | None) -> Caller:
        """The caller an auth layer in front names. An auth layer that *appends* its header
        to the client's (rather than replacing it) sends two: believing either one lets the
        client's claim win when it comes first. So a name or scopes header sent twice, or a
        name with a comma (two lines combined into one, RFC 9110 §5.3), names nobody."""
        names = headers.getall(self.header, ())
        grants = headers.getall(self.scopes_header, ()) if self.scopes_header else []
        ambiguous = [self.header] if len(names) > 1 or (names and "," in names[0]) else []
        if self.scopes_header is not None and len(grants) > 1:
            ambiguous.append(self.scopes_header)
        if ambiguous:
            self.spoofs.ambiguous(peer, " and ".join(ambiguous), "trusted_header")
            return ANONYMOUS
        name = names[0].strip() if names else ""
        if not name:
            return ANONYMOUS
        known = self.principals.get(name, Caller(name, frozenset()))
        if not grants:
            return known
        extra = frozenset(s for s in grants[0].replace(",", " ").split() if s)
        return Caller(name, known.scopes | extra)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.strip().encode()).hexdigest()
