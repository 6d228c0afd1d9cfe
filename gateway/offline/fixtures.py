"""Rule fixtures: sample failures with the classification they must get.

A fixture file lists cases (a request plus an upstream response or transport fault) and the
fields the failure must have. Every shipped pack has one, run by the test suite; users run
their own with `mendpoint test`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from multidict import CIMultiDict
from pydantic import Field, model_validator

from gateway.classify import Classifier
from gateway.config.loaded import LoadedConfig
from gateway.config.model_base import Strict
from gateway.config.yaml_model import validate_model
from gateway.config.yamlsrc import parse_yaml
from gateway.enrich.envelope import error_object, failure_object
from gateway.enrich.step import Enricher
from gateway.failure import NO_RECOVERY, Category, TransportKind
from gateway.offline.explain import Sample, explain


class FixtureRequest(Strict):
    method: str = "GET"
    path: str = "/"
    headers: dict[str, str] = Field(default_factory=dict)


class FixtureResponse(Strict):
    """What the upstream answered: a raw `body` string, or `json` sent compact.

    `json` is serialised as frameworks send it (no spaces after `,` and `:`), so a regex
    copied from real traffic matches the fixture too. `content_type` sets Content-Type
    (default `application/json` for `json`) unless `headers` already does.
    """

    status: int = Field(ge=100, le=599)
    headers: dict[str, str] = Field(default_factory=dict)
    content_type: str | None = None
    body: str | None = None
    json_: Any = Field(default=None, alias="json")

    @model_validator(mode="after")
    def _one_body(self) -> FixtureResponse:
        if self.body is not None and "json_" in self.model_fields_set:
            raise ValueError("give either body (raw text) or json, not both")
        return self

    def body_bytes(self) -> bytes:
        if "json_" in self.model_fields_set:
            return json.dumps(self.json_, ensure_ascii=False, separators=(",", ":")).encode()
        return (self.body or "").encode()

    def header_map(self) -> CIMultiDict[str]:
        headers = CIMultiDict(self.headers)
        content_type = self.content_type
        if content_type is None and "json_" in self.model_fields_set:
            content_type = "application/json"
        if content_type is not None and "Content-Type" not in headers:
            headers["Content-Type"] = content_type
        return headers


class FixtureRpcError(Strict):
    code: int
    message: str = ""
    data: Any = None


class FixtureMcp(Strict):
    """An MCP failure: a tool error (the text of its text items) or a JSON-RPC error."""

    tool: str | None = None
    text: str | None = None
    error: FixtureRpcError | None = None
    annotations: dict[str, Any] | None = None
    """The tool's `annotations` as its server's tools/list gives them (`readOnlyHint`,
    `idempotentHint`: docs/rules.md#tool-annotations); listed before the call when given."""
    input_schema: dict[str, Any] | None = None
    """The tool's `inputSchema` as its server's tools/list gives it (its `required` list is
    checked against `arguments`: docs/rules.md#required-arguments); listed when given."""
    arguments: dict[str, Any] | None = None
    """The `tools/call` request's arguments (none when not given)."""

    @model_validator(mode="after")
    def _one_kind(self) -> FixtureMcp:
        if (self.text is None) == (self.error is None):
            raise ValueError("give exactly one of text (a tool error) or error (a JSON-RPC error)")
        return self

    def body_bytes(self) -> bytes:
        if self.error is not None:
            error = self.error.model_dump(exclude_unset=True)
            return json.dumps(error, ensure_ascii=False, separators=(",", ":")).encode()
        return (self.text or "").encode()


class FixtureField(Strict):
    field: str
    message: str


class FixtureExpect(Strict):
    matched: bool = True
    rule: str | None = None
    code: str | None = None
    category: Category | None = None
    message: str | None = None
    retryable: bool | None = None
    retry_after_ms: int | None = None
    fix_required: str | None = None
    fix_command: str | None = None
    suggestion: str | None = None
    recoverable: bool | None = None
    fields: list[FixtureField] | None = None


class FixtureCase(Strict):
    name: str
    request: FixtureRequest = Field(default_factory=FixtureRequest)
    response: FixtureResponse | None = None
    transport: TransportKind | None = None
    mcp: FixtureMcp | None = None
    expect: FixtureExpect

    @model_validator(mode="after")
    def _one_outcome(self) -> FixtureCase:
        given = [x for x in (self.response, self.transport, self.mcp) if x is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of response, transport or mcp")
        return self


class FixtureFile(Strict):
    cases: list[FixtureCase] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    mismatches: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.mismatches


def load_fixtures(text: str, file: str) -> FixtureFile:
    return validate_model(FixtureFile, parse_yaml(text, file))


def run_fixtures(
    loaded: LoadedConfig, fixtures: FixtureFile, classifier: Classifier | None = None
) -> list[CaseResult]:
    """Every case through `explain` (the proxy's own enrichment step, offline)."""
    enricher = Enricher.offline(loaded, classifier)

    async def run_all() -> list[CaseResult]:
        return [await _run_case(loaded, case, enricher) for case in fixtures.cases]

    return asyncio.run(run_all())


def sample_of(case: FixtureCase) -> Sample:
    """The case as `explain` takes it (the test suite replays it through a live gateway)."""
    response, mcp = case.response, case.mcp
    body = response.body_bytes() if response else mcp.body_bytes() if mcp else b""
    return Sample(
        method=case.request.method if mcp is None else "POST",
        path=case.request.path,
        status=response.status if response else None,
        headers=response.header_map() if response else CIMultiDict(),
        body=body,
        transport=case.transport,
        tool=mcp.tool if mcp else None,
        tool_annotations=mcp.annotations if mcp else None,
        tool_input_schema=mcp.input_schema if mcp else None,
        arguments=mcp.arguments if mcp else None,
        jsonrpc_code=mcp.error.code if mcp and mcp.error else None,
        is_mcp=mcp is not None,
        request_headers=CIMultiDict(case.request.headers),
    )


async def _run_case(loaded: LoadedConfig, case: FixtureCase, enricher: Enricher) -> CaseResult:
    result = await explain(loaded, sample_of(case), enricher=enricher)
    expect = case.expect
    if result.verdict is None:
        return CaseResult(case.name, () if not expect.matched else ("no rule matched",))
    if not expect.matched:
        return CaseResult(case.name, (f"expected no match, got rule {result.verdict.rule.id}",))
    failure = result.verdict.failure
    actual: dict[str, Any] = {
        **error_object(failure, NO_RECOVERY, ""),
        **failure_object(failure),
        "rule": result.verdict.rule.id,
    }
    actual.setdefault("fields", [])
    mismatches = []
    for key, wanted in expect.model_dump(exclude_unset=True, exclude={"matched"}).items():
        got = actual[key]
        if got != wanted:
            mismatches.append(f"{key}: expected {wanted!r}, got {got!r}")
    return CaseResult(case.name, tuple(mismatches))
