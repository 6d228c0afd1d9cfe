"""The `fleet:` section's shape (docs/operations.md#fleet): the store replicas share
follow-ups, gaps and bridge sessions through. Kept apart from `models.py` because the fleet
is an optional feature with its own secrets and its own validation."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from gateway.config.model_base import Strict, parse_host_port
from gateway.config.route_model import TlsSpec

# Addresses a replica listens on but nobody can reach it at.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


class FleetSessionsSpec(Strict):
    """Bridge sessions usable through any replica (docs/mcp.md#replicas): the key that signs
    session ids and relayed requests, and the internal port other replicas relay to."""

    # A file of keys, one a line (a Secret mounted read-only): the first signs, every one
    # verifies, so a key is rotated without a window of 404s. 32 or more visible ASCII.
    key_file: str = Field(min_length=1)
    # The internal relay port: other replicas send a session's requests here, signed.
    listen: str
    # HOST:PORT other replicas reach `listen` at; default: listen's host, or for 0.0.0.0
    # and [::] the address this host's name resolves to (a Pod's IP in Kubernetes).
    advertise: str | None = None

    @field_validator("listen", "advertise")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None:
            parse_host_port(value)
        return value

    @field_validator("advertise")
    @classmethod
    def _reachable(cls, value: str | None) -> str | None:
        if value is not None and parse_host_port(value)[0] in WILDCARD_HOSTS:
            raise ValueError("advertise must name an address other replicas can reach")
        return value


class FleetSpec(Strict):
    """The store replicas share follow-ups and gaps through (docs/operations.md#fleet)."""

    # redis://HOST:PORT/DB, rediss:// for TLS, or unix:///PATH; a password goes in
    # password_file, never in the URL (it would sit in a ConfigMap and in `ps`).
    redis: str = Field(pattern=r"^(rediss?://[^\s/?#]+(/\d{1,2})?|unix:///[^\s?#]+)$")
    password_file: str | None = Field(default=None, min_length=1)
    tls: TlsSpec | None = None  # with rediss:// only
    # Every store call is bounded by this; past it the gateway tracks per process.
    timeout_ms: int = Field(default=250, ge=10, le=5000)
    key_prefix: str = Field(default="mendpoint", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    # Store writes waiting while the store is down, replayed when it returns; past this
    # the oldest are dropped, counted (mendpoint_fleet_store_dropped_total).
    queue_max: int = Field(default=10_000, ge=100, le=1_000_000)
    # Bridge sessions across replicas; without it a session is usable on its replica only.
    sessions: FleetSessionsSpec | None = None
    # Signs what replicas share through the store (events, relay records): a replica applies
    # only what another wrote (docs/security.md#fleet-store). Default: sessions.key_file.
    key_file: str | None = Field(default=None, min_length=1)

    @field_validator("redis")
    @classmethod
    def _no_password_in_url(cls, value: str) -> str:
        userinfo = value.partition("://")[2].partition("/")[0].rpartition("@")[0]
        if ":" in userinfo:
            raise ValueError("put the password in password_file, not in the URL")
        return value

    @model_validator(mode="after")
    def _a_key(self) -> FleetSpec:
        if self.key_file is None and self.sessions is None:
            raise ValueError(
                "key_file is required: it signs what replicas share through the store, so a "
                "replica applies only what another replica wrote (make one: "
                "openssl rand -hex 32 > fleet.key; chmod 600 fleet.key)"
            )
        return self

    @model_validator(mode="after")
    def _tls_needs_rediss(self) -> FleetSpec:
        if self.tls is not None and not self.redis.startswith("rediss://"):
            raise ValueError("tls is only used with a rediss:// URL")
        if self.tls is not None and self.tls.server_name is not None:
            raise ValueError("tls.server_name is not supported here: the URL's host is verified")
        return self
