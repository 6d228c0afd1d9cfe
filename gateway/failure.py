"""The vocabulary every layer shares: categories, exit codes, modes, transport faults, Failure.

This module imports nothing from the rest of the package, so config, classification,
rendering and the proxy can all speak of a `Failure` without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Category(StrEnum):
    """The closed set of `failure.category` values (docs/spec.md)."""

    VALIDATION_ERROR = "VALIDATION_ERROR"
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    RATE_LIMITED = "RATE_LIMITED"
    UNAVAILABLE = "UNAVAILABLE"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    AUTH_REQUIRED = "AUTH_REQUIRED"
    TIMEOUT = "TIMEOUT"
    POLICY_DENIED = "POLICY_DENIED"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UPSTREAM_ERROR = "UPSTREAM_ERROR"


EXIT_CODES: dict[Category, int] = {
    Category.UPSTREAM_ERROR: 1,
    Category.VALIDATION_ERROR: 2,
    Category.NOT_FOUND: 3,
    Category.CONFLICT: 4,
    Category.RATE_LIMITED: 5,
    Category.UNAVAILABLE: 6,
    Category.PERMISSION_DENIED: 7,
    Category.AUTH_REQUIRED: 8,
    Category.TIMEOUT: 9,
    Category.POLICY_DENIED: 10,
    Category.PAYLOAD_TOO_LARGE: 11,
}


class Mode(StrEnum):
    """How a classified failure is delivered (docs/spec.md, Shapes), from least to most invasive."""

    ORIGINAL = "original"
    HEADERS = "headers"
    ADDITIVE = "additive"
    ENVELOPE = "envelope"


class TransportKind(StrEnum):
    """Ways the upstream exchange can fail without an HTTP response to classify."""

    CONNECT_REFUSED = "connect_refused"
    CONNECT_TIMEOUT = "connect_timeout"
    DNS_FAILURE = "dns_failure"
    READ_TIMEOUT = "read_timeout"
    RESET = "reset"
    INVALID_RESPONSE = "invalid_response"
    TLS = "tls"  # the handshake failed: certificate, name, protocol or client certificate

    @property
    def request_unsent(self) -> bool:
        """True when the upstream cannot have received the request, so a retry is safe."""
        return self in _UNSENT


_UNSENT = frozenset(
    {
        TransportKind.CONNECT_REFUSED,
        TransportKind.CONNECT_TIMEOUT,
        TransportKind.DNS_FAILURE,
        TransportKind.TLS,
    }
)


class Refusal(StrEnum):
    """Requests the gateway answers itself, without the upstream: its own failures
    (docs/transparency.md#the-gateways-own-answers)."""

    NO_ROUTE = "no_route"
    UNSAFE_PATH = "unsafe_path"
    BODY_TOO_LARGE = "body_too_large"
    BODY_TIMEOUT = "body_timeout"
    UNDECODABLE_BODY = "undecodable_body"
    HEADERS_TOO_LARGE = "headers_too_large"
    TARGET_TOO_LONG = "target_too_long"
    MALFORMED = "malformed"
    CONTROL_IN_PATH = "control_in_path"
    VERSION_NOT_SUPPORTED = "version_not_supported"
    OVERLOADED = "overloaded"
    ROUTE_CONNECTIONS = "route_connections"
    UPSTREAM_CONNECTIONS = "upstream_connections"
    SERVER_EXITED = "server_exited"
    """`mendpoint stdio`: the server exited before answering; the relay ends with it."""
    SESSION_SERVER_EXITED = "session_server_exited"
    """The bridge: a session's server exited before answering; a new session starts anew."""

    @property
    def status(self) -> int:
        return _REFUSAL_STATUS[self]


_REFUSAL_STATUS = {
    Refusal.NO_ROUTE: 404,
    Refusal.UNSAFE_PATH: 400,
    Refusal.BODY_TOO_LARGE: 413,
    Refusal.BODY_TIMEOUT: 408,
    Refusal.UNDECODABLE_BODY: 415,
    Refusal.HEADERS_TOO_LARGE: 431,
    Refusal.TARGET_TOO_LONG: 414,
    Refusal.MALFORMED: 400,
    Refusal.CONTROL_IN_PATH: 400,
    Refusal.VERSION_NOT_SUPPORTED: 505,
    Refusal.OVERLOADED: 503,
    Refusal.ROUTE_CONNECTIONS: 503,
    Refusal.UPSTREAM_CONNECTIONS: 503,
    # Answered inside a JSON-RPC message, never as an HTTP status of their own.
    Refusal.SERVER_EXITED: 502,
    Refusal.SESSION_SERVER_EXITED: 502,
}


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field the upstream named as at fault (`error.fields`, docs/rules.md#errorfields)."""

    field: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class Failure:
    """A classified failure: the ladder fields of docs/spec.md plus where the verdict came from."""

    code: str
    category: Category
    message: str
    retryable: bool
    retry_after_ms: int | None
    fix_required: str | None
    fix_command: str | None
    suggestion: str | None
    recovery_intent: str | None
    rule_id: str
    from_default_rule: bool
    fields: tuple[FieldError, ...] = ()
    """Present only when the upstream named the fields at fault."""

    @property
    def recoverable(self) -> bool:
        """Correctable: a fix is stated or a repair intent exists (docs/spec.md)."""
        return self.fix_required is not None or self.recovery_intent is not None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.category]


@dataclass(frozen=True, slots=True)
class RecoveryOption:
    """One ranked, advisory repair: call `skill_name`, then retry the original operation."""

    rank: int
    skill_name: str
    skill_version: str
    purpose: str
    then_retry: str

    def to_json(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "skill_name": self.skill_name,
            "skill_version": self.skill_version,
            "purpose": self.purpose,
            "then_retry": {"skill_name": self.then_retry, "advisory": True},
        }


@dataclass(frozen=True, slots=True)
class Recovery:
    """The `recovery` block; `NO_RECOVERY` is the one shape used whatever the reason."""

    options: tuple[RecoveryOption, ...] = ()

    @property
    def available(self) -> bool:
        return bool(self.options)

    def to_json(self) -> dict[str, object]:
        return {"available": self.available, "options": [o.to_json() for o in self.options]}


NO_RECOVERY = Recovery()
