"""An exchange the head sampler dropped: its facts kept cheaply until its outcome is known.

Production gateways sample the head and keep what matters; what matters here is the failures
(docs/operations.md#traces). An exchange the sampler did not pick (`sample_ratio`, its caller's
decision) costs, while it runs, its two ids, the `traceparent` it sends on, and a tuple per
fact the data path reports (an attempt sent or answered, a classified failure, the MCP
request): no span, no attribute dict. When it ends as a failure (the gateway classified it:
an HTTP failure, a transport fault, a refusal, a tool or JSON-RPC error) and the budget of
kept failures allows (`telemetry.max_kept_failures_per_s`, per process), the exchange is built
after the fact, every span with the times it happened at and `mendpoint.sampled_for:
failure`, as if it had been sampled from the start; past the budget it is dropped as the
head sampler said, and counted. A success is dropped at the cost of one list.

An MCP request whose `params._meta.traceparent` names a sampled caller is the caller's to
trace: followed whatever its outcome, as a head-sampled exchange is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import TraceFlags

from gateway.telemetry.metrics import TRACES_KEPT
from gateway.telemetry.span_conventions import (
    TRACEPARENT,
    TRACESTATE,
    Finished,
    UpstreamOrigin,
    error_type,
    never_raises,
    parent_from,
)
from gateway.telemetry.span_pipe import SpanPipe
from gateway.telemetry.spans import ExchangeTrace

FAILURE = "failure"
Fact = tuple[str, int, tuple[Any, ...]]
"""A fact as the data path reported it: the `ExchangeTrace` method, when, its arguments."""


class KeptFailures:
    """How many dropped exchanges may be kept for their failure: a token bucket of
    `per_s` a second, holding at most one second's worth (a burst of failures keeps the
    first `per_s` and then `per_s` a second)."""

    def __init__(self, per_s: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s = per_s
        self._clock = clock
        self._tokens = float(per_s)
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(float(self.per_s), self._tokens + (now - self._at) * self.per_s)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class DeferredTrace:
    """The facts of an exchange the head sampler dropped (its interface is `ExchangeTrace`'s)."""

    __slots__ = (
        "_budget",
        "_facts",
        "_pipe",
        "_request",
        "_span_id",
        "_start_ns",
        "_trace_id",
        "category",
        "mcp_name",
        "parent_sampled",
        "resolution",
    )

    def __init__(
        self,
        pipe: SpanPipe,
        budget: KeptFailures | None,
        trace_id: int,
        request: tuple[str, str, str, str | None, str, str | None, str | None],
    ) -> None:
        """`request`: method, path, scheme, Host, HTTP version, `traceparent`, `tracestate`;
        `budget`: None when failures are not kept (`telemetry.keep_failures: false`)."""
        self._pipe = pipe
        self._budget = budget
        self._trace_id = trace_id
        self._span_id = pipe.new_span_id()
        self._start_ns = time.time_ns()
        self._request = request
        self._facts: list[Fact] = []
        self.parent_sampled = False
        self.category: str | None = None
        self.resolution: str | None = None
        self.mcp_name: str | None = None

    def _note(self, name: str, *args: Any) -> None:
        self._facts.append((name, time.time_ns(), args))

    def mcp_request(
        self, message: Any, session_id: str | None, protocol_version: str | None
    ) -> None:
        self._note("mcp_request", message, session_id, protocol_version)
        self.parent_sampled = self.parent_sampled or _meta_sampled(message)

    def mcp_failed(self, jsonrpc_code: int | None) -> None:
        self._note("mcp_failed", jsonrpc_code)

    def classified(
        self,
        code: str,
        category: str,
        rule: str,
        retryable: bool,
        retry_after_ms: int | None,
        mode: str,
    ) -> None:
        self._note("classified", code, category, rule, retryable, retry_after_ms, mode)

    def sending(
        self,
        resend_count: int,
        method: str,
        origin: UpstreamOrigin,
        target: str,
        headers: MutableMapping[str, str],
    ) -> None:
        """The upstream's parent is the exchange, not sampled (as the SDK would send it)."""
        headers[TRACEPARENT] = f"00-{self._trace_id:032x}-{self._span_id:016x}-00"
        self._note("sending", resend_count, method, origin, target, {})

    def to_child(self, executable: str) -> None:
        self._note("to_child", executable)

    def failed(self, exc: BaseException) -> None:
        self._note("failed_as", error_type(exc))

    def answered(self, status: int) -> None:
        self._note("answered", status)

    def ids(self) -> tuple[str, str] | None:
        return f"{self._trace_id:032x}", f"{self._span_id:016x}"

    @never_raises
    def end(self, record: Finished) -> None:
        """Built and exported now if its caller sampled it or it failed within the budget;
        otherwise nothing more happens."""
        kept = None
        if not self.parent_sampled:
            if record.failure_code is None or self._budget is None:
                return
            if not self._budget.take():
                TRACES_KEPT.labels(outcome="over_limit").inc()
                return
            TRACES_KEPT.labels(outcome="kept").inc()
            kept = FAILURE
        self.built(kept).end(record)

    def built(self, kept: str | None) -> ExchangeTrace:
        """The exchange's `ExchangeTrace`, each fact reported to it again at its own time."""
        at = [self._start_ns]
        method, path, scheme, host, version, traceparent, tracestate = self._request
        trace = ExchangeTrace(
            self._pipe,
            method,
            path,
            scheme,
            host,
            version,
            traceparent,
            tracestate,
            ids=(self._trace_id, self._span_id),
            start_ns=self._start_ns,
            kept=kept,
            now=lambda: at[0],
        )
        trace.resolution = self.resolution
        for name, when, args in self._facts:
            at[0] = when
            getattr(trace, name)(*args)
        at[0] = time.time_ns()
        return trace


def _meta_sampled(message: Any) -> bool:
    """The first request in an MCP message names a sampled caller in `_meta.traceparent`."""
    for item in message if isinstance(message, list) else (message,):
        if isinstance(item, dict) and isinstance(item.get("method"), str):
            params = item.get("params")
            meta = params.get("_meta") if isinstance(params, dict) else None
            if not isinstance(meta, dict):
                return False
            tp, ts = meta.get(TRACEPARENT), meta.get(TRACESTATE)
            parent = parent_from(
                tp if isinstance(tp, str) else None, ts if isinstance(ts, str) else None
            )
            if parent is None:
                return False
            flags = trace.get_current_span(parent).get_span_context().trace_flags
            return bool(flags & TraceFlags.SAMPLED)
    return False
