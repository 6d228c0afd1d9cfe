"""The remote resolver's wire format (docs/recovery.md), shared by client and `mendpoint resolver`.

Both sides validate with these models: a resolver answer that does not fit is an error, and the
gateway then sends the failure without options.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.failure import Category

MAX_OPTIONS = 20


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WireFailure(Wire):
    category: Category
    code: str = Field(max_length=64)
    intent: str = Field(max_length=64)


class WireCaller(Wire):
    scopes: list[str] = Field(default_factory=list, max_length=256)


class WireContext(Wire):
    route: str | None = Field(default=None, max_length=64)
    operation: str = Field(max_length=256)
    tool: str | None = Field(default=None, max_length=256)


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
