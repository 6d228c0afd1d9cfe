"""Evaluating a sample failure offline: which rule matches and what each mode would send.

`mendpoint explain` and the rule fixtures (`mendpoint test`, and the test suite) both run a
`Sample` through the same classifier and renderer the proxy uses, without any network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from multidict import CIMultiDict

from gateway.classify import Classifier, Observation, Verdict
from gateway.classify.observation import carries_idempotency_key
from gateway.classify.render_failure import parse_retry_after
from gateway.config.loaded import LoadedConfig
from gateway.envelope import Exchange, Rendering, render
from gateway.failure import NO_RECOVERY, Mode, Recovery, TransportKind
from gateway.proxy.body import decoded_for_matching
from gateway.proxy.routes import RouteTable
from gateway.resolve.callers import ANONYMOUS, Caller
from gateway.resolve.catalog import Catalog
from gateway.resolve.local import ResolveQuery, resolve_locally


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
    jsonrpc_code: int | None = None
    is_mcp: bool = False
    """An MCP failure: `body` is a tool error's text or a JSON-RPC error object."""
    request_headers: CIMultiDict[str] = field(default_factory=CIMultiDict)
    """What the caller sent (an `Idempotency-Key` changes what may be retried)."""


@dataclass(frozen=True, slots=True)
class Explanation:
    route: str
    verdict: Verdict | None
    rendering: Rendering | None
    filtered: tuple[tuple[str, str], ...] = ()
    """Operator-only: skills that declare the intent but were left out, and why."""


class SampleError(ValueError):
    """The sample cannot be evaluated (no route matches its path)."""


def explain(
    loaded: LoadedConfig,
    sample: Sample,
    mode: Mode = Mode.ENVELOPE,
    classifier: Classifier | None = None,
    caller: Caller = ANONYMOUS,
) -> Explanation:
    routes = RouteTable(loaded.config.routes)
    route = routes.find(sample.path.partition("?")[0])
    if route is None:
        raise SampleError(f"no route's prefix matches {sample.path!r}")
    classifier = classifier or Classifier(loaded)
    cap = loaded.config.limits.error_body_bytes
    body = None
    if sample.transport is None and len(sample.body) <= cap:
        body = decoded_for_matching(sample.body, sample.headers.get("Content-Encoding", ""), cap)
    obs = Observation(
        route=route.spec.name,
        method=sample.method.upper(),
        path=sample.path.partition("?")[0],
        status=sample.status,
        transport=sample.transport,
        headers=sample.headers,
        body=body,
        content_type=sample.headers.get("Content-Type", ""),
        idempotent=sample.method.upper() in route.idempotent,
        idempotency_key=carries_idempotency_key(sample.request_headers),
        tool=""
        if sample.is_mcp and sample.tool is None and sample.jsonrpc_code is None
        else sample.tool,
        jsonrpc_code=sample.jsonrpc_code,
    )
    verdict = classifier.classify(obs, deadline=math.inf)  # offline: per-regex timeouts only
    if verdict is None:
        return Explanation(route.spec.name, None, None)
    exchange = Exchange(
        request_id=sample.request_id,
        duration_ms=0,
        upstream_status=sample.status,
        content_type=obs.content_type,
        body=obs.body,
        body_json=obs.json if obs.body is not None else None,
        transport=sample.transport,
        upstream_retry_after=parse_retry_after(sample.headers.get("Retry-After")) is not None,
    )
    failure = verdict.failure
    recovery: Recovery = NO_RECOVERY
    filtered: tuple[tuple[str, str], ...] = ()
    if failure.recovery_intent is not None:
        operation = route.operation_for(obs.method, obs.path)
        query = ResolveQuery(
            failure.category, failure.code, failure.recovery_intent, caller.scopes, operation
        )
        catalog = Catalog.build(loaded.skills, loaded.policies)
        resolution = resolve_locally(catalog, query, loaded.config.resolver.max_options)
        recovery, filtered = Recovery(resolution.options), resolution.filtered
    rendering = render(mode, failure, recovery, exchange, loaded.config.headers.prefix)
    return Explanation(route.spec.name, verdict, rendering, filtered)
