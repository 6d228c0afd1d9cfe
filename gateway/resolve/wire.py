"""The remote resolver's wire format (docs/recovery.md), shared by client and `mendpoint resolver`.

Both sides validate with these models: a resolver answer that does not fit is an error, and the
gateway then sends the failure without options.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.failure import Category

MAX_OPTIONS = 20
MAX_ROUTE_CHARS = 64
MAX_NAME_CHARS = 256
"""An operation's or a tool's name on the wire; a longer one is cut to fit (`fitted`)."""
CUT = "…"


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WireFailure(Wire):
    category: Category
    code: str = Field(max_length=64)
    intent: str = Field(max_length=64)


class WireCaller(Wire):
    scopes: list[str] = Field(default_factory=list, max_length=256)


class WireContext(Wire):
    route: str | None = Field(default=None, max_length=MAX_ROUTE_CHARS)
    operation: str = Field(max_length=MAX_NAME_CHARS)
    tool: str | None = Field(default=None, max_length=MAX_NAME_CHARS)


class ResolveRequest(Wire):
    failure: WireFailure
    caller: WireCaller
    context: WireContext


class WireOption(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    rank: int | None = Field(default=None, ge=1)
    skill_name: str = Field(min_length=1, max_length=128)
    skill_version: str = Field(min_length=1, max_length=64)
    purpose: str = Field(min_length=1, max_length=1000)


class ResolveResponse(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    options: list[WireOption] = Field(max_length=MAX_OPTIONS)
    catalog_version: str | None = Field(default=None, max_length=128)


def fitted(text: str | None, limit: int) -> str | None:
    """`text` within `limit` characters: cut, its end marked `…`. The context a request
    carries says where a failure happened; a path a client made 10,000 characters long is not
    a reason to send nothing, nor one the resolver's validation should count as its failure
    (docs/recovery.md#central-resolver)."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - len(CUT)] + CUT
