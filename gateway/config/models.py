"""Pydantic models of the config file and rule packs: the shape users write (docs/configuration.md).

Only shape and local value checks live here; checks that need the whole config (registry
references, duplicate ids, class invariants with file and line) live in `validate.py`.
Every model forbids unknown keys so a typo is an error, not a silently ignored setting.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import regex
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.config.jsonpath import parse_json_path
from gateway.config.trust import parse_network
from gateway.failure import Category, Mode, TransportKind

_CODE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")
_INTENT = re.compile(r"^[a-z][a-z0-9_.\-]{0,63}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CommandSpec(Strict):
    """A registry entry: the only place a `fix_command` string can come from."""

    run: str = Field(min_length=1, max_length=500)
    idempotent: bool = False
    destructive: bool = False
    description: str | None = None


def _json_path(value: str | None) -> str | None:
    if value is not None:
        parse_json_path(value)
    return value


class JsonMatch(Strict):
    """One condition on the JSON body; with wildcards in `path`, any value reached may match."""

    path: str = Field(min_length=1)
    regex: str | None = None
    equals: str | int | float | bool | None = None

    _path = field_validator("path")(_json_path)


class McpMatch(Strict):
    tool: str | None = None
    jsonrpc_code: int | None = None


StatusSpec = int | str


class MatchSpec(Strict):
    """Conditions a failure must meet; all given conditions must hold."""

    routes: list[str] | None = Field(default=None, min_length=1)  # [] would never match
    methods: list[str] | None = Field(default=None, min_length=1)
    status: list[StatusSpec] | None = Field(default=None, min_length=1)
    path: str | None = None
    headers: dict[str, str] | None = None
    # One condition, or a list of them that must all hold.
    json_: JsonMatch | list[JsonMatch] | None = Field(default=None, alias="json")
    body: str | None = None
    mcp: McpMatch | None = None
    transport: list[TransportKind] | None = Field(default=None, min_length=1)
    # true: the request may be repeated (its method is idempotent on the route, or the
    # caller sent an Idempotency-Key); false: it may not.
    idempotent: bool | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("json_")
    @classmethod
    def _some_json(
        cls, value: JsonMatch | list[JsonMatch] | None
    ) -> JsonMatch | list[JsonMatch] | None:
        if isinstance(value, list) and not value:
            raise ValueError("give at least one condition (an empty list would match anything)")
        return value

    @property
    def json_conditions(self) -> tuple[JsonMatch, ...]:
        """The `json:` conditions as a tuple, whichever form was written."""
        if self.json_ is None:
            return ()
        return tuple(self.json_) if isinstance(self.json_, list) else (self.json_,)

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        upper = [m.upper() for m in value]
        unknown = sorted(set(upper) - HTTP_METHODS)
        if unknown:
            raise ValueError(f"unknown HTTP method(s) {unknown}")
        return upper

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        for name in value:
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid header name")
        return {name.lower(): pattern for name, pattern in value.items()}


class RetryAfterSpec(Strict):
    """Where to find the retry delay; the first source present wins, then `default`.

    `header` and `json` are read first, then `capture`; then, unless `hints: false`, the
    standard hints (Retry-After, retry-after-ms, AIP-193 RetryInfo, RateLimit,
    x-ratelimit-reset). `capture` names a named group of the rule's regexes holding a
    duration as a server wrote it ("30 seconds", "12s", "500 ms", "2 minutes"; a bare number
    is in `unit`): MCP servers turn an API's 429 into text, and this is where its timing
    survives.
    """

    header: str | None = None
    json_: str | None = Field(default=None, alias="json")
    capture: str | None = Field(default=None, min_length=1)
    unit: Literal["s", "ms"] = "s"
    default: int | None = Field(default=None, ge=0)
    hints: bool = True

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    _path = field_validator("json_")(_json_path)


class FieldsSpec(Strict):
    """Where the upstream names the fields at fault: one `error.fields` entry per `each`.

    `field` and `message` are paths inside each item; without `field` the object keys the
    wildcards of `each` visited name the field (DRF's `{"name": ["…"]}`), and without
    `message` the item itself is the message.
    """

    each: str
    field: str | None = None
    message: str | None = None

    _paths = field_validator("each", "field", "message")(_json_path)


class ErrorSpec(Strict):
    """What a matching rule produces: the ladder fields of docs/spec.md."""

    code: str
    category: Category
    message: str | None = Field(default=None, max_length=1000)
    retryable: bool = False
    fix_required: str | None = Field(default=None, max_length=1000)
    fix_command: str | None = None
    retry_after_ms: int | RetryAfterSpec | None = None
    suggestion: str | None = Field(default=None, max_length=1000)
    recovery_intent: str | None = None
    side_effect_free: bool = False
    # Where the upstream names fields (one spec, or several tried in order until one finds
    # some); the failure then carries `error.fields` and, without a `message`, names them.
    fields: FieldsSpec | list[FieldsSpec] | None = None

    @property
    def fields_specs(self) -> tuple[FieldsSpec, ...]:
        if self.fields is None:
            return ()
        return tuple(self.fields) if isinstance(self.fields, list) else (self.fields,)

    @field_validator("code")
    @classmethod
    def _upper_snake(cls, value: str) -> str:
        if not _CODE.match(value) or len(value) > 64:
            raise ValueError(f"{value!r} must be an UPPER_SNAKE constant of at most 64 characters")
        return value

    @field_validator("recovery_intent")
    @classmethod
    def _intent_name(cls, value: str | None) -> str | None:
        if value is not None and not _INTENT.match(value):
            raise ValueError(
                f"{value!r} must be a lower-case identifier (letters, digits, '_', '.', '-')"
            )
        return value

    @field_validator("retry_after_ms")
    @classmethod
    def _non_negative(cls, value: int | RetryAfterSpec | None) -> int | RetryAfterSpec | None:
        if isinstance(value, int) and value < 0:
            raise ValueError("must be zero or more")
        return value


class RuleSpec(Strict):
    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")
    description: str | None = None
    match: MatchSpec
    error: ErrorSpec


class RulePack(Strict):
    """A rule pack (`mappings/*.yaml`); `skills`, `policies`: the catalog (docs/recovery.md)."""

    rules: list[RuleSpec] = Field(default_factory=list)
    commands: dict[str, CommandSpec] = Field(default_factory=dict)
    companions: list[str] | None = None
    skills: list[SkillSpec] = Field(default_factory=list)
    policies: list[PolicySpec] = Field(default_factory=list)


class SkillSpec(Strict):
    """A recovery skill that declares which repair intents it serves."""

    name: str = Field(min_length=1, max_length=128)
    version: str = Field(min_length=1, max_length=64)
    recovers: list[str] = Field(min_length=1)
    repair: Literal["inspect", "prepare", "normalize", "sanitize", "decompose", "enrich", "reauth"]
    purpose: str = Field(min_length=1, max_length=1000)
    scopes: list[str] = Field(default_factory=list)
    priority: int = 100


class PolicyAllow(Strict):
    intent: str
    skills: list[str] = Field(min_length=1)


class PolicySpec(Strict):
    allow: PolicyAllow


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
    # Sessions one caller (or anonymous client address) may hold at once, so one client
    # cannot take the whole route (docs/mcp.md#sessions-belong-to-their-caller).
    max_sessions_per_caller: int = Field(default=4, ge=1, le=10_000)
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
            for key in ("session_idle_s", "max_sessions", "max_sessions_per_caller"):
                if key in self.model_fields_set:
                    raise ValueError(f"{key} is only for mcp routes with a command (the bridge)")
        elif (
            "max_sessions_per_caller" in self.model_fields_set
            and self.max_sessions_per_caller > self.max_sessions
        ):
            raise ValueError(
                f"max_sessions_per_caller ({self.max_sessions_per_caller}) is above "
                f"max_sessions ({self.max_sessions}); it can be at most max_sessions"
            )
        return self

    @property
    def sessions_per_caller(self) -> int:
        """The per-caller bound in force: the default never exceeds a smaller route bound."""
        return min(self.max_sessions_per_caller, self.max_sessions)

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
    max_tracked_requests: int = Field(default=1024, ge=1, le=1_000_000)
    max_sessions: int = Field(default=4096, ge=1, le=1_000_000)
    max_message_bytes: int = Field(default=16 << 20, ge=1024, le=1 << 30)
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


class CaptureSpec(Strict):
    """Failing exchanges recorded for `mendpoint suggest` (docs/rules.md); off by default."""

    dir: str = Field(min_length=1)
    rate: float = Field(default=1.0, ge=0, le=1)
    max_files: int = Field(default=1000, ge=1, le=1_000_000)
    max_bytes: int = Field(default=50 << 20, ge=1024, le=1 << 34)
    max_body_bytes: int = Field(default=64 << 10, ge=0, le=16 << 20)
    headers: list[str] = Field(
        default_factory=lambda: ["Content-Type", "Retry-After", "WWW-Authenticate"]
    )
    """Response headers recorded (the request's are never recorded but Content-Type)."""


class FollowupsSpec(Strict):
    """What callers do after a failure, measured per route and code (docs/operations.md)."""

    enabled: bool = True
    window_s: float = Field(default=300, gt=0, le=86_400)
    max_tracked: int = Field(default=100_000, ge=1, le=10_000_000)
    # The memory the open failures may hold, counted at their measured size
    # (gateway.feedback.followups.entry_bytes); whichever of the two bounds is reached first evicts.
    max_bytes: int = Field(default=16 << 20, ge=64 << 10, le=4 << 30)


class HeadersSpec(Strict):
    prefix: str = Field(default="X-Error-", pattern=r"^[A-Za-z0-9\-]+$")


MAX_WORKERS = 1024
DEFAULT_MESSAGE_PATHS = (
    "error.message",
    "message",
    "detail",
    "error_description",
    "title",
    "error",
)


def _network(value: str) -> str:
    parse_network(value)
    return value


# Not 9090 (Prometheus itself), nor 9091-9094, 9100-9999 (Prometheus's exporter allocations),
# 9464 (OpenTelemetry's Prometheus exporter) or 9901 (Envoy's admin): a gateway must start on
# the host that scrapes it. Why this one: docs/operations.md#admin-listener.
DEFAULT_ADMIN = "127.0.0.1:8491"


# One CIDR block (or address) per item, checked item by item so an error names its line.
TrustedBlock = Annotated[str, AfterValidator(_network)]


class GatewayConfig(Strict):
    """The `mendpoint serve --config` file (docs/configuration.md)."""

    listen: str = "127.0.0.1:8080"
    admin: str | None = DEFAULT_ADMIN
    # The bearer tokens the admin listener accepts on /metrics, /gaps and /followups, one per
    # line (docs/security.md#admin-authentication); /healthz and /readyz stay open.
    admin_token_file: str | None = Field(default=None, min_length=1)
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
    mcp: McpSpec = Field(default_factory=McpSpec)
    followups: FollowupsSpec = Field(default_factory=FollowupsSpec)
    redaction: RedactionSpec = Field(default_factory=RedactionSpec)
    log: LogSpec = Field(default_factory=LogSpec)
    shutdown: ShutdownSpec = Field(default_factory=ShutdownSpec)
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


def parse_host_port(value: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets) → (host, port); ValueError with a readable message."""
    match = re.match(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.\-]+):(\d{1,5})$", value)
    if not match or not 0 <= int(match.group(2)) <= 65535:
        raise ValueError(f"{value!r} must be HOST:PORT (e.g. 127.0.0.1:8080)")
    return match.group(1).strip("[]"), int(match.group(2))


RulePack.model_rebuild()
