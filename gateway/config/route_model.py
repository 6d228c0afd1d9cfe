"""The shape of one route of the config file: where it goes, its mode, TLS, paths, captures.

(docs/configuration.md#routes)
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.model_base import HTTP_METHODS, Strict
from gateway.failure import Mode


class CaptureSpec(Strict):
    """Failing exchanges recorded for `mendpoint suggest` (docs/rules.md); off by default.
    The directory is a ring: past `max_files` or `max_bytes` the oldest file makes room."""

    dir: str = Field(min_length=1)
    only: Literal["unmatched", "all"] = "unmatched"
    """Which failures: those only a shipped fallback named (what a draft is for), or all."""
    rate: float = Field(default=1.0, ge=0, le=1)
    max_files: int = Field(default=1000, ge=1, le=1_000_000)
    max_bytes: int = Field(default=50 << 20, ge=1024, le=1 << 34)
    max_body_bytes: int = Field(default=64 << 10, ge=0, le=16 << 20)
    headers: list[str] = Field(
        default_factory=lambda: ["Content-Type", "Retry-After", "WWW-Authenticate"]
    )
    """Response headers recorded (the request's are never recorded but Content-Type)."""


class RolloutSpec(Strict):
    percent: Annotated[float, Field(ge=0, le=100)] = 100
    by: Literal["caller", "request"] = "caller"


class TlsSpec(Strict):
    """How a route talks TLS to its `https` upstream (gateway/config/tls.py)."""

    ca_file: str | None = Field(default=None, min_length=1)  # trusted instead of the system store
    cert_file: str | None = Field(default=None, min_length=1)  # client certificate (mTLS)
    key_file: str | None = Field(default=None, min_length=1)  # its key, if not in cert_file
    server_name: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.\-]+$"
    )
    insecure: bool = False  # no verification at all; warned about at start

    @model_validator(mode="after")
    def _consistent(self) -> TlsSpec:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs cert_file")
        if self.insecure and self.ca_file is not None:
            raise ValueError("insecure: true verifies nothing, so ca_file would be ignored")
        return self


DEFAULT_IDEMPOTENT = ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"]


class OperationSpec(Strict):
    """The name `then_retry` gives requests of one method and path template (an operationId)."""

    method: str = Field(pattern=r"^[A-Za-z]+$")
    path: str = Field(pattern=r"^/", max_length=1000)
    """A path template: `{name}` stands for one path segment (`/orders/{id}`)."""
    name: str = Field(min_length=1, max_length=128)


class MetaOriginalSpec(Strict):
    """What an envelope's `meta.original` carries of the upstream's body (docs/security.md):
    all of it (as today), its first `max_bytes` (cut where the body is longer, with
    `truncated: true`), or none of it (its content type and length only)."""

    body: Literal["full", "truncated", "none"] = "full"
    max_bytes: int = Field(default=4096, ge=64, le=1_048_576)


DotSegments = Literal["resolve", "refuse"]
EscapedSlashes = Literal["keep", "refuse", "decode"]


class PathSpec(Strict):
    """How a route reads request paths (docs/configuration.md#paths). The defaults keep
    every path a client library sends as it was sent, and refuse those that would leave the
    route for some server behind it."""

    dot_segments: DotSegments = "resolve"
    escaped_slashes: EscapedSlashes = "keep"
    merge_slashes: bool = False
    case_sensitive: bool = False


# A prefix is a plain path: segments of RFC 3986 characters that no server reads otherwise
# (no %-escape, backslash or `;`), none of them empty, `.` or `..`.
_PREFIX = re.compile(r"^/([A-Za-z0-9\-._~!$&'()*+,=:@]+(/[A-Za-z0-9\-._~!$&'()*+,=:@]+)*/?)?$")


SESSION_KEYS = (
    "session_idle_s",
    "max_sessions",
    "max_sessions_per_caller",
    "max_sessions_per_address",
)


class RouteSpec(Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    prefix: str = Field(default="/", pattern=r"^/")
    upstream: str | None = None
    type: Literal["http", "mcp"] = "http"
    mode: Mode = Mode.ADDITIVE
    client_override: bool = True
    operation: str | None = Field(default=None, max_length=128)
    operations: list[OperationSpec] = Field(default_factory=list)
    idempotent_methods: list[str] = Field(default_factory=lambda: list(DEFAULT_IDEMPOTENT))
    rollout: RolloutSpec | None = None
    capture: CaptureSpec | None = None
    preserve_host: bool = False
    strip_prefix: bool = False
    tls: TlsSpec | None = None  # only for https:// upstreams
    # Additive mode, HTTP routes: an HTML or text error answers a client whose Accept prefers
    # JSON with the envelope (docs/configuration.md#routes).
    json_for_json_clients: bool = True
    meta_original: MetaOriginalSpec = Field(default_factory=MetaOriginalSpec)
    # MCP routes only (docs/mcp.md): the DNS-rebinding defence and the stdio bridge.
    allowed_origins: list[str] | None = None
    allowed_hosts: list[str] | None = None
    command: list[str] | None = Field(default=None, min_length=1)
    # The URL clients reach this route's prefix at, written into the OAuth protected-resource
    # metadata the gateway relays (docs/mcp.md, "OAuth behind the gateway").
    public_url: str | None = None
    session_idle_s: float = Field(default=300, gt=0, le=86_400)
    max_sessions: int = Field(default=16, ge=1, le=10_000)
    # Sessions one named caller may hold at once, so one client cannot take the whole route;
    # an anonymous address (many agents behind one NAT, perhaps) max_sessions_per_address,
    # by default half the route's (docs/mcp.md#sessions-belong-to-their-caller). All three
    # count across the workers of one gateway.
    max_sessions_per_caller: int = Field(default=4, ge=1, le=10_000)
    max_sessions_per_address: int | None = Field(default=None, ge=1, le=10_000)
    # Upstream connections this route's requests may hold at once (streams apart); None: as
    # many as limits.max_upstream_connections (docs/transparency.md#fair-shares-of-the-pool).
    max_connections: int | None = Field(default=None, ge=1)
    path: PathSpec = Field(default_factory=PathSpec)

    @field_validator("prefix")
    @classmethod
    def _plain_prefix(cls, value: str) -> str:
        """A prefix every server reads the same way, so a path matches it or does not."""
        segments = value.strip("/").split("/")
        if not _PREFIX.match(value) or any(s in (".", "..") for s in segments):
            raise ValueError(
                f"{value!r} must be a plain path: ASCII letters, digits and -._~!$&'()*+,=:@ "
                "in segments separated by single slashes, with no %-escapes, backslashes, "
                "';', '.' or '..' segments"
            )
        return value

    @field_validator("upstream", "public_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "@" in value.partition("://")[2].partition("/")[0]:
            # Never sent upstream (the client's own credentials are forwarded), but it would
            # sit in the start-up log and on the console: refused, and not echoed here.
            raise ValueError(
                "user information (user:password@) in the URL is never sent upstream and "
                "would be shown in logs and on the console: remove it; the upstream gets the "
                "caller's own Authorization header"
            )
        if not re.match(r"^https?://[^/?#\s]+(/[^?#\s]*)?$", value):
            raise ValueError(f"{value!r} must be an http:// or https:// URL with a host")
        return value.rstrip("/")

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str] | None) -> list[str] | None:
        for origin in value or []:
            if origin != "*" and not re.match(r"^[a-z][a-z0-9+.\-]*://[^/?#\s]+$", origin):
                raise ValueError(f"{origin!r} must be an origin such as https://app.example:8443")
        return value

    @model_validator(mode="after")
    def _target(self) -> RouteSpec:
        """An HTTP route needs an upstream URL; an MCP route an upstream URL or a command."""
        if self.type == "http":
            if self.upstream is None:
                raise ValueError("upstream is required")
            for key in ("allowed_origins", "allowed_hosts", "command", "public_url"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} is only for type: mcp routes")
        elif (self.upstream is None) == (self.command is None):
            raise ValueError("an mcp route needs exactly one of upstream (a URL) or command")
        elif "json_for_json_clients" in self.model_fields_set:
            raise ValueError("json_for_json_clients is only for type: http routes")
        if self.tls is not None and not (self.upstream or "").startswith("https://"):
            raise ValueError("tls is only for https:// upstreams")
        if self.command is not None and self.max_connections is not None:
            raise ValueError("max_connections is only for routes with an upstream URL")
        if self.command is None:
            for key in SESSION_KEYS:
                if key in self.model_fields_set:
                    raise ValueError(f"{key} is only for mcp routes with a command (the bridge)")
        else:
            for key in ("max_sessions_per_caller", "max_sessions_per_address"):
                share = getattr(self, key)
                if key in self.model_fields_set and share is not None and share > self.max_sessions:
                    raise ValueError(
                        f"{key} ({share}) is above max_sessions ({self.max_sessions}); it can "
                        "be at most max_sessions"
                    )
        return self

    def sessions_for(self, holder_kind: str) -> int:
        """The sessions one holder may have at once: a named caller's bound (the default never
        above a smaller route bound), or an address's, by default half the route's: an
        address may be many agents behind one NAT, or one client, and cannot be told apart,
        so it gets enough for a platform and leaves the rest at least half."""
        if holder_kind == "caller":
            return min(self.max_sessions_per_caller, self.max_sessions)
        if self.max_sessions_per_address is not None:
            return self.max_sessions_per_address
        return max(1, (self.max_sessions + 1) // 2)

    @field_validator("command")
    @classmethod
    def _argv(cls, value: list[str] | None) -> list[str] | None:
        """An argv list, run without a shell: an empty or NUL-bearing word cannot be exec'd."""
        for word in value or []:
            if not word or "\x00" in word:
                raise ValueError("command words must be non-empty strings without NUL")
        return value

    @field_validator("idempotent_methods")
    @classmethod
    def _methods(cls, value: list[str]) -> list[str]:
        upper = [m.upper() for m in value]
        unknown = sorted(set(upper) - HTTP_METHODS)
        if unknown:
            raise ValueError(f"unknown HTTP method(s) {unknown}")
        return upper
