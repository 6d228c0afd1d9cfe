"""The shape of a rule pack (`mappings/*.yaml`, `rules:` files): rules, commands, the catalog.

Only shape and local value checks live here; checks that need the whole config (registry
references, duplicate ids) live in `validate.py` (docs/rules.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from gateway.config.model_base import (
    _CODE,
    _HEADER_NAME,
    _INTENT,
    HTTP_METHODS,
    CommandSpec,
    Strict,
    _json_path,
)
from gateway.failure import Category, Mode, TransportKind


class JsonMatch(Strict):
    """One condition on the JSON body; with wildcards in `path`, any value reached may match."""

    path: str = Field(min_length=1)
    regex: str | None = None
    equals: str | int | float | bool | None = None

    _path = field_validator("path")(_json_path)


class McpMatch(Strict):
    tool: str | None = None
    jsonrpc_code: int | None = None
    is_error: bool = True
    """false: the rule reads results the server reported as successes (`isError: false`)
    and turns a match into a failure; opt-in, per tool
    (docs/rules.md#failures-reported-as-successes)."""
    missing_required: bool | None = None
    """true: the call left out an argument its tool's inputSchema lists as `required` (the
    server's tools/list, as the gateway saw it); `{missing}` names them; false: it did not
    (docs/rules.md#required-arguments)."""
    argument: Literal["named", "echoed", "only"] | None = None
    """Which argument of the call the failure's text is about, named by `{argument}`:
    `named`: it names one of the tool's inputSchema `properties` or echoes a value the call
    sent for one; `echoed`: it repeats such a value, whole or a quoted part; `only`: the
    message is that value and nothing else (docs/rules.md#arguments-named-in-a-failure)."""
    credential_argument: bool | None = None
    """true: the tool takes a credential as an argument (an inputSchema property such as
    `api_key`, `token`, `password`), named by `{credential}`; false: it takes none, so a
    refused credential is the server's own (docs/rules.md#whose-credentials)."""


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
    request_echoed: bool | None = None
    """true: the failure's text repeats a value the request sent in its path or query (a
    query parameter's value, a path segment), named by `{parameter}`; false: it repeats none
    (docs/rules.md#values-the-request-sent)."""

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
    # In an included file only (the console's drafts file): a route of the main file moved
    # one step along original → headers → additive → envelope (route_modes.py checks it).
    route_modes: dict[str, Mode] = Field(default_factory=dict)


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


RulePack.model_rebuild()
