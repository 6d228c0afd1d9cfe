"""The fleet's session key: what signs bridge session ids and the requests replicas relay to
each other (docs/security.md#bridge-sessions-across-replicas).

A bridge session id names the process that holds the session. With `fleet.sessions`, the
name carries an HMAC-SHA256 (128 bits) under a key only the replicas hold, so a client can
neither make up an id naming a replica (to have the gateway look it up in the store and relay
on its behalf) nor change one part of a real id: either is a 404 before anything else
happens. A request one replica relays to another's internal port carries an HMAC over its
method, target, session id, client peer and request id, and the time it was signed; the port
refuses any request without a valid one made within `RELAY_SKEW_S`, so only a replica can
name the client whose session it is (the owner believes the peer it is told).

What replicas share through the store is signed too (`fleet.key_file`, or the sessions' key
file when there is no other): every message on the events channel and every relay record, so
a replica applies only what another replica wrote, not what anyone who can write to Redis
does (docs/security.md#fleet-store). The uses have keys of their own, derived from the file's
secret, so a MAC of one kind is never valid as another. The file may hold several secrets,
one a line: the first signs, every one verifies, so a key is rotated by adding the new one
second, then moving it first, then dropping the old one, without a window in which live
sessions become 404s.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gateway.config.secrets import TokenError, read_tokens
from gateway.header_names import MCP_SESSION_ID, RELAY_SIGNATURE, RELAYED_PEER, REQUEST_ID

MIN_KEY_CHARS = 32
ID_MAC_BYTES = 16
RELAY_SKEW_S = 30
"""How far a relayed request's signing time may be from the receiver's clock: replicas'
clocks agree within this (NTP), and a request captured on the wire is refused after it."""


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The derived keys of every secret in `fleet.sessions.key_file`, the signing one first."""

    ids: tuple[bytes, ...]
    relay: tuple[bytes, ...]
    shared: tuple[bytes, ...]

    @classmethod
    def from_secrets(cls, secrets: Sequence[str]) -> SessionKeys:
        if not secrets:
            raise ValueError("no session key")
        return cls(
            ids=tuple(_derive(secret, b"mendpoint bridge session id v1") for secret in secrets),
            relay=tuple(_derive(secret, b"mendpoint session relay v1") for secret in secrets),
            shared=tuple(_derive(secret, b"mendpoint fleet store v1") for secret in secrets),
        )

    def sign_shared(self, data: bytes) -> str:
        """The MAC of something one replica writes to the store for the others (128 bits)."""
        return _mac(self.shared[0], data)[: ID_MAC_BYTES * 2]

    def shared_valid(self, data: bytes, mac: str) -> bool:
        return any(
            hmac.compare_digest(_mac(key, data)[: ID_MAC_BYTES * 2], mac) for key in self.shared
        )

    def sign_id(self, body: str) -> str:
        """The MAC that ends a session id whose other parts are `body`."""
        return _mac(self.ids[0], body.encode())[: ID_MAC_BYTES * 2]

    def id_valid(self, body: str, mac: str) -> bool:
        data = body.encode()
        return any(
            hmac.compare_digest(_mac(key, data)[: ID_MAC_BYTES * 2], mac) for key in self.ids
        )

    def sign_relay(self, fields: Iterable[str], now: float) -> str:
        """`TIME.MAC`: the value of the relay signature header for a request with `fields`."""
        stamp = str(int(now))
        return f"{stamp}.{_mac(self.relay[0], _relay_text(stamp, fields))}"

    def signs(self, method: str, target: str, headers: Mapping[str, str], now: float) -> bool:
        """The request carries a valid relay signature: another replica relayed it."""
        value = headers.get(RELAY_SIGNATURE)
        return value is not None and self.relay_valid(
            value, relay_fields(method, target, headers), now
        )

    def relay_valid(self, value: str, fields: Iterable[str], now: float) -> bool:
        stamp, dot, mac = value.partition(".")
        if not dot or not stamp.isdigit() or abs(int(stamp) - now) > RELAY_SKEW_S:
            return False
        text = _relay_text(stamp, fields)
        return any(hmac.compare_digest(_mac(key, text), mac) for key in self.relay)


def read_session_keys(path: str) -> SessionKeys:
    """A fleet key file's keys (`fleet.key_file`, `fleet.sessions.key_file`), each long
    enough for an HMAC; TokenError if not."""
    secrets = read_tokens(path)
    short = [n for n, secret in enumerate(secrets, start=1) if len(secret) < MIN_KEY_CHARS]
    if short:
        raise TokenError(
            f"{path}: key {short[0]} is shorter than {MIN_KEY_CHARS} characters "
            f"(make one with `openssl rand -hex 32`)"
        )
    return SessionKeys.from_secrets(secrets)


def relay_fields(method: str, target: str, headers: Mapping[str, str]) -> tuple[str, ...]:
    """What a relay signature covers: the request line, the session, the client's peer as
    the relaying replica saw it, and the request id (`headers`: case-insensitive)."""
    return (
        method,
        target,
        headers.get(MCP_SESSION_ID, ""),
        headers.get(RELAYED_PEER, ""),
        headers.get(REQUEST_ID, ""),
    )


def _derive(secret: str, purpose: bytes) -> bytes:
    return hmac.new(secret.encode(), purpose, hashlib.sha256).digest()


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _relay_text(stamp: str, fields: Iterable[str]) -> bytes:
    # Each field is a header value or a request target: none holds a line break.
    return "\n".join((stamp, *fields)).encode("utf-8", "surrogateescape")


__all__ = ["MIN_KEY_CHARS", "RELAY_SKEW_S", "SessionKeys", "read_session_keys", "relay_fields"]
