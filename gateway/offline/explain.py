"""Evaluating a sample failure offline: which rule matches and what the client would receive.

`mendpoint explain` and the rule fixtures (`mendpoint test`, and the test suite) run a
`Sample` through the same enrichment step the proxy runs (`gateway.enrich.step`, offline: no
budget, the local catalog, nothing counted) and build the answer with the proxy's own
helpers, so what `explain` shows is what the live gateway sends (docs/operations.md).
An HTTP sample is answered as an HTTP route would; an MCP sample (a tool error or a JSON-RPC
error) as an MCP route answers a `tools/call` whose upstream replied `application/json`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from gateway.classify import Observation, ObservationKind, Verdict
from gateway.classify.observation import carries_idempotency_key
from gateway.classify.why_not import PassedOver, passed_over
from gateway.config.errors import Refused
from gateway.config.loaded import LoadedConfig
from gateway.enrich.step import Enricher, FailureContext
from gateway.exchange.answer import (
    JSON_TYPE,
    Answers,
    Rendering,
    RouteAnswers,
    apply_rendering,
    matchable,
    synthesised,
)
from gateway.exchange.headers import client_response_headers
from gateway.exchange.routes import Route, RouteTable
from gateway.failure import Mode, Recovery, TransportKind
from gateway.header_names import ACCEPT, REQUEST_ID
from gateway.mcp.jsonrpc import Pending, encode, requests_in
from gateway.mcp.upgrade import Upgrader
from gateway.resolve.callers import ANONYMOUS, Caller
from gateway.resolve.catalog import Catalog
from gateway.resolve.local import ResolveQuery, resolve_locally
from gateway.resolve.service import Situation
from gateway.text.json_text import dump

SAMPLE_RPC_ID = 1
"""The JSON-RPC id of the `tools/call` an MCP sample answers."""


@dataclass(frozen=True, slots=True)
class Sample:
    """A request and what the upstream answered (a status and body, or a transport fault)."""

    method: str = "GET"
    path: str = "/"
    status: int | None = None
    headers: CIMultiDict[str] = field(default_factory=CIMultiDict)
    body: bytes = b""
    transport: TransportKind | None = None
    request_id: str = "explain-0000"
    tool: str | None = None
    tool_annotations: dict[str, Any] | None = None
    """The tool's annotations in its server's tools/list, when the sample lists it first."""
    tool_input_schema: dict[str, Any] | None = None
    """The tool's inputSchema in its server's tools/list, when the sample lists it first."""
    arguments: dict[str, Any] | None = None
    """The arguments of the `tools/call` the sample answers."""
    jsonrpc_code: int | None = None
    is_mcp: bool = False
    """An MCP failure: `body` is a tool error's text or a JSON-RPC error object."""
    request_headers: CIMultiDict[str] = field(default_factory=CIMultiDict)
    """What the caller sent (an `Idempotency-Key` changes what may be retried)."""

    def rpc_response(self) -> dict[str, Any]:
        """The JSON-RPC response an MCP sample stands for: the answer to `tools/call`."""
        if self.jsonrpc_code is not None:
            error = _json_or_text(self.body)
            if not isinstance(error, dict):
                error = {"code": self.jsonrpc_code, "message": str(error)}
            # The server's own error, replayed: not one the gateway makes (mcp/rpc_errors.py).
            response: dict[str, Any] = {"jsonrpc": "2.0", "id": SAMPLE_RPC_ID}
            response["error"] = error
            return response
        content = [{"type": "text", "text": self.body.decode("utf-8", "replace")}]
        result = {"content": content, "isError": True}
        return {"jsonrpc": "2.0", "id": SAMPLE_RPC_ID, "result": result}

    def rpc_request(self) -> dict[str, Any]:
        """The `tools/call` request an MCP sample's response answers."""
        params: dict[str, Any] = {"arguments": dict(self.arguments or {})}
        if self.tool is not None:
            params["name"] = self.tool
        return {"jsonrpc": "2.0", "id": SAMPLE_RPC_ID, "method": "tools/call", "params": params}

    def tools_listing(self) -> dict[str, Any] | None:
        """The tools/list result that declares the sample's tool, if the sample gives its
        annotations or inputSchema."""
        if self.tool is None or (self.tool_annotations is None and self.tool_input_schema is None):
            return None
        tool: dict[str, Any] = {"name": self.tool}
        tool["inputSchema"] = self.tool_input_schema or {"type": "object"}
        if self.tool_annotations is not None:
            tool["annotations"] = self.tool_annotations
        return {"tools": [tool]}


@dataclass(frozen=True, slots=True)
class Answer:
    """What the client would receive, the gateway's own per-request headers included."""

    status: int
    headers: CIMultiDict[str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Explanation:
    route: str
    verdict: Verdict | None
    rendering: Rendering | None
    """What the gateway changes: headers it adds and, when it rewrites the body, the body."""
    answer: Answer
    filtered: tuple[tuple[str, str], ...] = ()
    """Operator-only: skills that declare the intent but were left out, and why."""
    passed_over: tuple[PassedOver, ...] = ()
    """The other rules tried on an HTTP sample, in order, and why each was not chosen."""
    not_candidates: int = 0
    """Rules never tried: written for other statuses, faults, paths or MCP."""


class SampleError(Refused, ValueError):
    """The sample cannot be evaluated (no route matches its path)."""


async def explain(
    loaded: LoadedConfig,
    sample: Sample,
    mode: Mode = Mode.ENVELOPE,
    enricher: Enricher | None = None,
    caller: Caller = ANONYMOUS,
) -> Explanation:
    routes = RouteTable(loaded.config.routes)
    path = sample.path.partition("?")[0]
    route, forwarded = routes.resolve(sample.path)
    if forwarded is None:
        raise SampleError(
            f"the gateway refuses {sample.path!r} itself (400 UNSAFE_PATH): it leaves its "
            "route, or reads as another path (docs/transparency.md#paths)"
        )
    if route is None:
        raise SampleError(f"no route's prefix matches {sample.path!r}")
    enricher = enricher or Enricher.offline(loaded)
    answers = Answers(enricher)
    if sample.is_mcp:
        return await _explain_mcp(loaded, sample, mode, enricher, caller, route)
    method = sample.method.upper()
    body: bytes | None = None
    if sample.transport is None:
        assert sample.status is not None, "a sample has a status or a transport fault"
        cap = loaded.config.limits.error_body_bytes
        read = sample.body if len(sample.body) <= cap else None
        body, mode, _ = matchable(method, sample.status, sample.headers, read, cap, mode)
    obs = Observation(
        route=route.spec.name,
        method=method,
        path=path,
        query=sample.path.partition("?")[2],
        kind=ObservationKind.STATUS if sample.transport is None else ObservationKind.TRANSPORT,
        status=sample.status,
        transport=sample.transport,
        headers=sample.headers,
        body=body,
        content_type=sample.headers.get("Content-Type", ""),
        idempotent=method in route.idempotent,
        idempotency_key=carries_idempotency_key(sample.request_headers),
    )
    operation = route.operation_for(method, path)
    situation = Situation(operation=operation, route=route.spec.name)
    ctx = _failure_context(route.spec.name, mode, caller, sample.request_id, situation)
    how = RouteAnswers.of(route.spec, sample.request_headers.get(ACCEPT))

    def explained(
        verdict: Verdict, recovery: Recovery, duration_ms: int
    ) -> tuple[Verdict, Rendering | None]:
        return verdict, answers.rendering(obs, ctx, how, verdict, recovery, duration_ms)

    result = await enricher.enrich(obs, ctx, explained)
    verdict, rendering = result if result is not None else (None, None)
    filtered = _filtered(loaded, verdict, caller, operation)
    others, untried = passed_over(enricher.classifier, obs, verdict.rule if verdict else None)
    answer = _http_answer(sample, rendering)
    return Explanation(route.spec.name, verdict, rendering, answer, filtered, others, untried)


async def _explain_mcp(
    loaded: LoadedConfig,
    sample: Sample,
    mode: Mode,
    enricher: Enricher,
    caller: Caller,
    route: Route,
) -> Explanation:
    message = sample.rpc_response()
    original = dump(message)
    called = (p for _, p in requests_in(sample.rpc_request()))  # as a relay reads the call
    pending = next(called, Pending("tools/call", sample.tool))
    site = _ExplainSite(route, sample.path.partition("?")[0], mode, caller, sample.request_id)
    upgrader = Upgrader(enricher, loaded.config.mcp)
    listing = sample.tools_listing()
    if listing is not None:  # as the session listed its tools first
        upgrader.tools.learn(route.spec.name, listing)
    outcome = await upgrader.upgrade(message, pending, site)
    verdict = outcome.verdict if outcome is not None else None
    headers = client_response_headers(CIMultiDictProxy(CIMultiDict({"Content-Type": JSON_TYPE})))
    headers[REQUEST_ID] = sample.request_id
    rendering = None
    body = original
    if outcome is not None:
        headers.extend(outcome.headers)
        new = None if outcome.message is None else encode(outcome.message)
        body = original if new is None else new
        rendering = Rendering(outcome.headers, new, JSON_TYPE if new is not None else None)
    headers["Content-Length"] = str(len(body))
    operation = sample.tool or pending.method
    filtered = _filtered(loaded, verdict, caller, operation)
    return Explanation(route.spec.name, verdict, rendering, Answer(200, headers, body), filtered)


def _http_answer(sample: Sample, rendering: Rendering | None) -> Answer:
    """The answer as an HTTP route builds it from the upstream's and the rendering
    (gateway/exchange/answer.py)."""
    if sample.transport is not None:
        headers: CIMultiDict[str] = CIMultiDict({REQUEST_ID: sample.request_id})
        status, body = synthesised(sample.transport, headers, rendering)
    else:
        assert sample.status is not None
        headers = client_response_headers(CIMultiDictProxy(sample.headers))
        headers.setdefault(REQUEST_ID, sample.request_id)  # as `echo_request_id`: theirs kept
        status, body = (
            sample.status,
            apply_rendering(headers, rendering, sample.status) or sample.body,
        )
    headers["Content-Length"] = str(len(body))
    return Answer(status, headers, body)


def _failure_context(
    route: str, mode: Mode, caller: Caller, request_id: str, situation: Situation
) -> FailureContext:
    return FailureContext(route, mode, request_id, caller, situation, started=time.monotonic())


@dataclass(frozen=True, slots=True)
class _ExplainSite:
    """The `CallSite` of an MCP sample: a `tools/call` POSTed to the sample's route."""

    route: Route
    path: str
    mode: Mode
    caller: Caller
    request_id: str

    @property
    def route_name(self) -> str:
        return self.route.spec.name

    @property
    def idempotent(self) -> bool:
        return "POST" in self.route.idempotent

    def failure_context(self, situation: Situation) -> FailureContext:
        return _failure_context(self.route_name, self.mode, self.caller, self.request_id, situation)


def _filtered(
    loaded: LoadedConfig, verdict: Verdict | None, caller: Caller, operation: str
) -> tuple[tuple[str, str], ...]:
    """Skills that declare the failure's intent but were not offered, and why (operator notes)."""
    failure = None if verdict is None else verdict.failure
    if failure is None or failure.recovery_intent is None:
        return ()
    query = ResolveQuery(
        failure.category, failure.code, failure.recovery_intent, caller.scopes, operation
    )
    catalog = Catalog.build(loaded.skills, loaded.policies)
    return resolve_locally(catalog, query, loaded.config.resolver.max_options).filtered


def _json_or_text(body: bytes) -> Any:
    text = body.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def render_explanation(result: Explanation) -> str:
    """What `mendpoint explain` prints, and the console's "Try a rule" page shows, as is."""
    if result.verdict is None:
        return f"route: {result.route}\nno rule matched: the response would pass through\n"
    rule = result.verdict.rule
    lines = [
        f"route: {result.route}",
        f"rule:  {rule.id} ({rule.origin}{', shipped default' if rule.is_default else ''})",
    ]
    rendering = result.rendering
    if rendering is not None:
        lines += [f"header: {name}: {value}" for name, value in rendering.headers]
        if rendering.body is None:
            lines.append("body: unchanged (the upstream's bytes)")
        elif rendering.content_type != "text/plain; charset=utf-8" and _is_json(rendering.body):
            lines.append(json.dumps(json.loads(rendering.body), indent=2, ensure_ascii=False))
        else:
            lines.append(rendering.body.decode())
    lines += [f"operator note: skill {skill} not offered: {why}" for skill, why in result.filtered]
    return "\n".join(lines) + "\n"


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def parse_header(line: str) -> tuple[str, str] | None:
    """`Name: value` (or `Name:value`) as a header; None when there is no name or colon."""
    name, sep, value = line.partition(":")
    if not sep or not name.strip():
        return None
    return name.strip(), value.strip()
