"""The shape of the config file users write (docs/configuration.md), route and rule models aside.

Only shape and local value checks live here; checks that need the whole config (registry
references, duplicate ids, class invariants with file and line) live in `validate.py`.
Routes are in `route_model.py`, rule packs in `rule_model.py`, the fleet store in
`fleet_model.py`, the shared base in `model_base.py`.
"""

from __future__ import annotations

import importlib.metadata
from typing import Annotated, Literal

import regex
from pydantic import AfterValidator, Field, field_validator, model_validator

from gateway.config.admin_address import DEFAULT_ADMIN
from gateway.config.fleet_model import FleetSpec
from gateway.config.jsonpath import parse_json_path
from gateway.config.model_base import _HEADER_NAME, CommandSpec, Strict, parse_host_port
from gateway.config.relay_limits import (
    MAX_BATCH_MESSAGES,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGE_VALUES,
    MAX_TRACKED_REQUESTS,
)
from gateway.config.route_model import RouteSpec, TlsSpec
from gateway.config.rule_model import PolicySpec, RuleSpec, SkillSpec
from gateway.config.trust import parse_network
from gateway.failure import Mode

_CALLER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.@:\-]{0,127}$"


class CallerKey(Strict):
    """An API key known only by its SHA-256: `sha256:` + 64 hex digits of the key."""

    name: str = Field(pattern=_CALLER_NAME)
    key: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    scopes: list[str] = Field(default_factory=list)


class Principal(Strict):
    """A caller named by a trusted header, with the scopes it holds."""

    name: str = Field(pattern=_CALLER_NAME)
    scopes: list[str] = Field(default_factory=list)


class KeysFile(Strict):
    """The file named by `callers.keys_file`: the same `keys:` list, kept out of the config."""

    keys: list[CallerKey] = Field(default_factory=list)


class CallersSpec(Strict):
    """Where caller identity comes from (docs/recovery.md); an unknown caller has no scopes."""

    source: Literal["api_key", "trusted_header"] = "api_key"
    header: str = Field(default="X-Api-Key", pattern=_HEADER_NAME.pattern)
    keys: list[CallerKey] = Field(default_factory=list)
    keys_file: str | None = None
    principals: list[Principal] = Field(default_factory=list)
    scopes_header: str | None = Field(default=None, pattern=_HEADER_NAME.pattern)


class ResolverSpec(Strict):
    budget_ms: int = Field(default=50, ge=1, le=10_000)
    max_options: int = Field(default=3, ge=0, le=20)
    url: str | None = Field(default=None, pattern=r"^https?://[^/?#\s]+(/[^#\s]*)?$")
    breaker_failures: int = Field(default=3, ge=1, le=1000)
    breaker_cooldown_s: float = Field(default=10, gt=0, le=3600)
    cache_size: int = Field(default=1024, ge=0, le=1_000_000)
    cache_ttl_s: float = Field(default=30, ge=0, le=86_400)
    # The bearer token the remote resolver expects (docs/security.md#resolver-authentication).
    token_file: str | None = Field(default=None, min_length=1)
    tls: TlsSpec | None = None  # as a route's, for an https:// url (mutual TLS too)

    @model_validator(mode="after")
    def _token_needs_url(self) -> ResolverSpec:
        if self.token_file is not None and self.url is None:
            raise ValueError("token_file is only used with url (a remote resolver)")
        if self.tls is not None and not (self.url or "").startswith("https://"):
            raise ValueError("tls is only used with an https:// url")
        return self


class LimitsSpec(Strict):
    """Resource bounds; every default is safe for an internet-facing sidecar."""

    error_body_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    connect_timeout_s: float = Field(default=5, gt=0, le=600)
    read_timeout_s: float = Field(default=60, gt=0, le=3600)
    total_timeout_s: float | None = Field(default=None, gt=0)
    # A per-read timeout restarts on every byte, so an upstream dripping one byte a second
    # would hold a request forever; this deadline does not restart (see ResponseDeadline).
    response_timeout_s: float = Field(default=60, gt=0, le=3600)
    max_request_body_bytes: int = Field(default=64 << 20, ge=0)
    request_body_timeout_s: float = Field(default=30, gt=0, le=3600)
    max_line_bytes: int = Field(default=8190, ge=256, le=1 << 20)
    max_header_bytes: int = Field(default=8190, ge=256, le=1 << 20)
    max_headers: int = Field(default=100, ge=8, le=1000)
    keepalive_timeout_s: float = Field(default=15, gt=0, le=3600)
    # Upstream connections are retired while idle before the upstream itself would close them
    # (gunicorn 2 s, uvicorn and Node 5 s): a close crossing a new request costs that request.
    upstream_idle_timeout_s: float = Field(default=1.5, gt=0, le=3600)
    # A request body up to this size is kept while it streams, so a request that met a dead
    # pooled connection can be sent again on a fresh one (see docs/configuration.md).
    replay_body_bytes: int = Field(default=64 << 10, ge=0, le=16 << 20)
    # Response heads: a generous cap (a 17 KB Content-Security-Policy is real), a per-field
    # length and a field count; Envoy allows 60 KiB and 100 fields by default.
    max_response_header_bytes: int = Field(default=64 << 10, ge=1024, le=1 << 20)
    max_response_headers: int = Field(default=500, ge=8, le=10_000)
    max_upstream_connections: int = Field(default=256, ge=1)
    # Connections carrying a stream (an SSE answer, or one with no declared end still flowing
    # after 2 s) are counted here instead, so streams cannot starve short requests; 0: never.
    max_upstream_streams: int = Field(default=1024, ge=0)
    # A WebSocket tunnel with no byte either way for this long is closed (docs/transparency.md).
    tunnel_idle_timeout_s: float = Field(default=300, gt=0, le=86_400)
    max_client_connections: int = Field(default=4096, ge=1)
    regex_timeout_ms: int = Field(default=50, ge=1, le=10_000)
    # Repeated failures answered from memory (docs/performance.md): at most this many answers
    # and bytes (error bodies and rendered bodies) per config; 0 entries turns the cache off.
    answer_cache_entries: int = Field(default=1024, ge=0, le=1_000_000)
    answer_cache_bytes: int = Field(default=8 << 20, ge=0, le=1 << 30)


class LogSpec(Strict):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "text"] = "json"
    access: bool = True


class TelemetrySpec(Strict):
    """OpenTelemetry traces over OTLP/HTTP (docs/operations.md#traces); off without an
    endpoint here or in `OTEL_EXPORTER_OTLP_ENDPOINT`. A key left out falls to its `OTEL_*`
    variable; the OpenTelemetry SDK comes with `pip install 'mendpoint[otel]'`."""

    # The collector's OTLP/HTTP URL; `/v1/traces` is added to one without a path.
    otlp_endpoint: str | None = Field(default=None, pattern=r"^https?://[^/?#\s]+(/[^#\s]*)?$")
    service_name: str | None = Field(default=None, min_length=1, max_length=200)
    # The share of new traces sampled; a caller's own decision (its traceparent) is followed.
    sample_ratio: float | None = Field(default=None, ge=0, le=1)
    # Sent with every export (a collector's tenant, say); keep credentials in
    # OTEL_EXPORTER_OTLP_HEADERS from a secret instead (docs/security.md#trace-export).
    headers: dict[str, str] = Field(default_factory=dict, max_length=50)
    # Exchanges the sampler dropped that fail are exported anyway (docs/operations.md#traces),
    # at most this many a second per process; past it, the sampler's word stands.
    keep_failures: bool = True
    max_kept_failures_per_s: int = Field(default=100, ge=1, le=100_000)

    @field_validator("otlp_endpoint")
    @classmethod
    def _sdk_installed(cls, value: str | None) -> str | None:
        """A collector named where the SDK is missing fails at load, with the file and line,
        not at the first request; found by its installed metadata, without importing it."""
        missing = [] if value is None else otel_missing()
        if missing:
            raise ValueError(
                f"traces need the OpenTelemetry SDK, which is not installed "
                f"({', '.join(missing)}): pip install 'mendpoint[otel]'"
            )
        return value

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if any(ch in text for ch in "\r\n\0"):
                raise ValueError(f"the value of {name} holds a line break or NUL")
        return value


OTEL_DISTRIBUTIONS = ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http")


def otel_missing() -> list[str]:
    """The distributions of the `otel` extra that are not installed."""
    missing = []
    for name in OTEL_DISTRIBUTIONS:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


class ShutdownSpec(Strict):
    """Graceful drain on SIGTERM: readiness goes false first, listeners close after the delay."""

    drain_delay_s: float = Field(default=5, ge=0, le=600)
    grace_s: float = Field(default=30, gt=0, le=3600)


DEFAULT_TOOL_GUIDANCE = (
    "If this tool fails, route on the fields of the mendpoint_failure item (error.code, "
    "error.retryable, error.fix_required), prefer the skills it lists under recovery, and "
    "never invent recovery skills."
)


COMPACT_TOOL_GUIDANCE = (
    "On failure, act on the mendpoint_failure item; use only the skills it lists."
)


class McpSpec(Strict):
    """How MCP failures are delivered and how much request tracking may cost (docs/mcp.md)."""

    failure_key: str = Field(default="mendpoint_failure", min_length=1, max_length=64)
    tool_guidance: str = Field(default=DEFAULT_TOOL_GUIDANCE, max_length=1000)
    tool_failure_extension: bool = True
    # The compact form: `_meta` points at the failure's text item instead of repeating it, and
    # the default guidance sentence is the short one (what it costs: docs/mcp.md, "Weight").
    compact: bool = False
    max_tracked_requests: int = Field(
        default=MAX_TRACKED_REQUESTS.default, ge=MAX_TRACKED_REQUESTS.ge, le=MAX_TRACKED_REQUESTS.le
    )
    max_sessions: int = Field(default=4096, ge=1, le=1_000_000)
    # Read before the model by a relay that starts before its config (relay_limits.py).
    max_message_bytes: int = Field(
        default=MAX_MESSAGE_BYTES.default, ge=MAX_MESSAGE_BYTES.ge, le=MAX_MESSAGE_BYTES.le
    )
    # A request is parsed only within these, else refused as too large (docs/security.md).
    max_message_values: int = Field(
        default=MAX_MESSAGE_VALUES.default, ge=MAX_MESSAGE_VALUES.ge, le=MAX_MESSAGE_VALUES.le
    )
    max_batch_messages: int = Field(
        default=MAX_BATCH_MESSAGES.default, ge=MAX_BATCH_MESSAGES.ge, le=MAX_BATCH_MESSAGES.le
    )
    # `mendpoint stdio`: how long the server's pending calls may run after the client closed
    # its input, before the server is ended (docs/mcp.md, "stdio").
    stdio_grace_s: float = Field(default=60, gt=0, le=86_400)

    @property
    def guidance(self) -> str:
        """The sentence `tools/list` descriptions gain: the user's, else the form's default."""
        if self.compact and "tool_guidance" not in self.model_fields_set:
            return COMPACT_TOOL_GUIDANCE
        return self.tool_guidance


class RedactionSpec(Strict):
    """Secrets masked in whatever the gateway copies out of a body (docs/security.md)."""

    builtin: bool = True
    patterns: list[str] = Field(default_factory=list, max_length=100)

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                regex.compile(pattern)
            except regex.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from None
        return value


class FollowupsSpec(Strict):
    """What callers do after a failure, measured per route and code (docs/operations.md)."""

    enabled: bool = True
    window_s: float = Field(default=300, gt=0, le=86_400)
    max_tracked: int = Field(default=100_000, ge=1, le=10_000_000)
    # The memory the open failures may hold, counted at their measured size
    # (gateway.feedback.followups.entry_bytes); whichever of the two bounds is reached first evicts.
    max_bytes: int = Field(default=16 << 20, ge=64 << 10, le=4 << 30)


class ConsoleSpec(Strict):
    """What the console (/ui) may write (docs/operations.md#console). Without it, read-only."""

    # The rule file "Save" appends drafted rules to: one the config lists in `include:`,
    # so what is saved is loaded, watched and checked as every included file is.
    drafts_file: str | None = Field(default=None, min_length=1)


class HeadersSpec(Strict):
    prefix: str = Field(default="X-Error-", pattern=r"^[A-Za-z0-9\-]+$")


MAX_WORKERS = 1024
DEFAULT_MESSAGE_PATHS = (
    "error.message",
    "message",
    "Message",
    "errorMessage",
    "detail",
    "description",
    "error_description",
    "errorDescription",
    "errors[*].message",
    "errors[*].detail",
    "msg",
    "statusMessage",
    "error.reason",
    "reason",
    "error",
    "title",
)
"""Where the common error shapes keep their words, most specific first: `Message` (AWS
JSON), `errorMessage` (AWS Lambda, Salesforce and older Java and .NET APIs) beside them,
`description` (Falcon), `error_description` (OAuth) and its camel-case spelling, `errors[*]`
(GraphQL, JSON:API, the OCI registry), a bare `msg` (Flask-JWT-Extended, many Go and Node
APIs), `statusMessage` (h3 and Nuxt's `createError`), a `reason` beside or under an
`error` that names the kind (CouchDB's `{"error": "not_found", "reason": …}`,
Elasticsearch's `{"error": {"type": …, "reason": …}}`), and a string `error` before a
`title` (Datasette), both of which often only name the kind of error:
docs/rules.md#message_paths-and-extra_message_paths-config."""


def _network(value: str) -> str:
    parse_network(value)
    return value


# One CIDR block (or address) per item, checked item by item so an error names its line.
TrustedBlock = Annotated[str, AfterValidator(_network)]

_HOST_NAME = regex.compile(
    r"(?i)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?"
)


def _host_name(value: str) -> str:
    if not _HOST_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS name: give the name alone, without scheme or port "
            "(IP addresses and localhost are answered anyway)"
        )
    return value.lower().rstrip(".")


# A name the admin listener answers without a token (docs/security.md#dns-rebinding).
AdminHost = Annotated[str, AfterValidator(_host_name)]


class GatewayConfig(Strict):
    """The `mendpoint serve --config` file (docs/configuration.md)."""

    listen: str = "127.0.0.1:8080"
    admin: str | None = DEFAULT_ADMIN
    # The bearer tokens the admin listener accepts on /metrics, /gaps and /followups, one per
    # line (docs/security.md#admin-authentication); /healthz and /readyz stay open.
    admin_token_file: str | None = Field(default=None, min_length=1)
    # Without a token, the admin listener answers a Host that is an IP address, localhost or
    # one of these names, and refuses any other: a DNS-rebound page's (docs/security.md).
    admin_hosts: list[AdminHost] = Field(default_factory=list)
    # `serve --workers`: processes sharing `listen` (SO_REUSEPORT); 0 or "auto": usable CPUs.
    workers: int | Literal["auto"] = 1
    include: list[str] = Field(default_factory=list)
    defaults: bool = True
    routes: list[RouteSpec] = Field(min_length=1)
    # The mode of the gateway's own answers where no route applies: a path no route serves,
    # a request head it cannot parse, the connection cap (docs/transparency.md).
    default_mode: Mode = Mode.ADDITIVE
    # Peers whose forwarding and identity headers are believed (docs/security.md).
    trusted_proxies: list[TrustedBlock] = Field(default_factory=list, max_length=1000)
    callers: CallersSpec | None = None
    resolver: ResolverSpec = Field(default_factory=ResolverSpec)
    enrich_budget_ms: int = Field(default=200, ge=1, le=60_000)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    headers: HeadersSpec = Field(default_factory=HeadersSpec)
    console: ConsoleSpec = Field(default_factory=ConsoleSpec)
    mcp: McpSpec = Field(default_factory=McpSpec)
    followups: FollowupsSpec = Field(default_factory=FollowupsSpec)
    fleet: FleetSpec | None = None  # shared across replicas (docs/operations.md#fleet)
    redaction: RedactionSpec = Field(default_factory=RedactionSpec)
    log: LogSpec = Field(default_factory=LogSpec)
    shutdown: ShutdownSpec = Field(default_factory=ShutdownSpec)
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    # Where the upstream's own message is looked for, in order: `extra_message_paths`
    # first, then `message_paths` (giving `message_paths` replaces these defaults).
    message_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_MESSAGE_PATHS))
    extra_message_paths: list[str] = Field(default_factory=list)
    rules: list[RuleSpec] = Field(default_factory=list)
    commands: dict[str, CommandSpec] = Field(default_factory=dict)
    companions: list[str] | None = None
    skills: list[SkillSpec] = Field(default_factory=list)
    policies: list[PolicySpec] = Field(default_factory=list)

    @field_validator("message_paths", "extra_message_paths")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for path in value:
            parse_json_path(path)
        return value

    @field_validator("listen", "admin")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None:
            parse_host_port(value)
        return value

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: object) -> object:
        if value == "auto" or (type(value) is int and 0 <= value <= MAX_WORKERS):
            return value
        raise ValueError(f"must be auto or a whole number from 0 to {MAX_WORKERS} (0 means auto)")
