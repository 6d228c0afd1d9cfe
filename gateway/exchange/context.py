"""One request as the data path sees it: route, state, access record, deadline, request id.

HTTP forwarding, the failure path and the MCP relays all take a `RequestContext`; who the
caller is and which mode they get are worked out lazily: on failures, and on bridge routes,
whose sessions belong to their caller (docs/mcp.md#sessions-belong-to-their-caller).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from aiohttp import web
from multidict import CIMultiDict

from gateway.classify import Observation, ObservationKind
from gateway.classify.observation import carries_idempotency_key
from gateway.config.trust import from_sibling
from gateway.enrich.step import FailureContext
from gateway.exchange.answer import RouteAnswers
from gateway.exchange.headers import visible_ascii
from gateway.exchange.routes import Route, choose_mode
from gateway.exchange.state import ExchangeState
from gateway.exchange.upstream.deadline import ResponseDeadline
from gateway.failure import Mode
from gateway.header_names import ACCEPT, ERROR_FORMAT, RELAYED_PEER, REQUEST_ID
from gateway.resolve.callers import Caller
from gateway.resolve.service import Situation
from gateway.telemetry.logs import AccessRecord
from gateway.telemetry.metrics import FallbackReason

T = TypeVar("T")


class once(Generic[T]):
    """`functools.cached_property` without its lock: on Python 3.11 every first read takes an
    RLock (3.12 removed it), and a failure reads four of these; a request is one task, so
    nothing can race (docs/performance.md#follow-ups-while-a-failure-is-open)."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self.compute = compute
        self.name = compute.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> once[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> T | once[T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.compute(obj)
        return value


@dataclass
class RequestContext:
    """One request as the failure path needs it.

    Who the caller is and which mode they get are worked out only here, on the failure path,
    so the success path never hashes an API key or a rollout key.
    """

    request: web.Request
    state: ExchangeState
    route: Route
    record: AccessRecord
    deadline: ResponseDeadline | None = None
    body_hasher: Any = None
    """A running digest of the request body, while follow-up tracking is on."""

    @property
    def request_id(self) -> str:
        return self.record.request_id

    @once
    def peer(self) -> str | None:
        """The TCP peer's address; for a request a sibling worker (`serve --workers`,
        docs/mcp.md#workers) or another replica (docs/mcp.md#replicas) relayed to the bridge
        session it holds, the peer that process saw, so trust, caller and session holder come
        out as they would have there."""
        request = self.request
        relayed = request.headers.get(RELAYED_PEER)
        if relayed is not None and (from_sibling(request.transport) or self.from_replica):
            return relayed or None
        return request.remote

    @once
    def from_replica(self) -> bool:
        """Another replica relayed this request, signed with the fleet's session key
        (gateway.config.session_keys): its word on the client's peer is believed, and it is
        never relayed to a third."""
        keys = self.state.loaded.session_keys
        request = self.request
        return keys is not None and keys.signs(
            request.method, request.raw_path, request.headers, time.time()
        )

    @once
    def from_trusted_proxy(self) -> bool:
        """The TCP peer is in `trusted_proxies`: its forwarding and identity headers count."""
        return self.state.proxies.trusts(self.peer)

    @once
    def client_address(self) -> str | None:
        """The original client's address: the peer, or what trusted proxies say it was."""
        forwarded = self.request.headers.getall("X-Forwarded-For", ())
        return self.state.proxies.client_address(self.peer, forwarded)

    @once
    def caller(self) -> Caller:
        request = self.request
        return self.state.callers.identify(
            request.headers, peer=self.peer, trusted=self.from_trusted_proxy
        )

    @once
    def mode(self) -> Mode:
        caller = self.caller
        rollout_key = caller.name if caller.name is not None else f"peer:{self.peer}"
        requested = self.request.headers.get(ERROR_FORMAT)
        return choose_mode(self.route, requested, rollout_key, self.request_id)

    @property
    def situation(self) -> Situation:
        operation = self.route.operation_for(self.request.method, self.request.path)
        return Situation(operation=operation, route=self.route.spec.name)

    def failure_context(
        self, situation: Situation | None = None, mode: Mode | None = None
    ) -> FailureContext:
        """This request as the enrichment step sees it (`situation`: an MCP call's own;
        `mode`: when the body cannot be rewritten, at most `headers`)."""
        return FailureContext(
            route=self.route.spec.name,
            mode=self.mode if mode is None else mode,
            request_id=self.request_id,
            caller=self.caller,
            situation=situation or self.situation,
            started=self.record.started,
            notes=self.record,
        )

    @property
    def route_answers(self) -> RouteAnswers:
        """What the route and the request's `Accept` decide about an HTTP answer's body."""
        return RouteAnswers.of(self.route.spec, self.request.headers.get(ACCEPT))

    def fell_back(self, reason: FallbackReason) -> None:
        self.state.enricher.fell_back(self.route.spec.name, self.record, reason)

    def observation(self, kind: ObservationKind, **fields: object) -> Observation:
        method = self.request.method
        return Observation(
            route=self.route.spec.name,
            method=method,
            path=self.request.path,
            query=self.request.query_string,
            kind=kind,
            idempotent=method in self.route.idempotent,
            idempotency_key=carries_idempotency_key(self.request.headers),
            **fields,  # type: ignore[arg-type]
        )


def echo_request_id(headers: CIMultiDict[str], record: AccessRecord) -> None:
    """The response's `X-Request-Id`: the upstream's own when it sent one (a client may
    correlate with the upstream's logs; both ids are logged), else the gateway's."""
    theirs = headers.get(REQUEST_ID)
    if theirs is None:
        headers[REQUEST_ID] = record.request_id
    elif theirs != record.request_id:
        record.upstream_request_id = theirs[:200]


def request_id_of(request: web.Request) -> str:
    """The caller's `X-Request-Id` when it is a sane token, else a fresh one."""
    value = request.headers.get(REQUEST_ID)
    if value and len(value) <= 200 and visible_ascii(value):
        return value
    return _REQUEST_IDS.fresh()


def fresh_request_id() -> str:
    """A new id, for an answer given before any request could be read."""
    return _REQUEST_IDS.fresh()


class _RequestIds:
    """32 hex digits, unique without a syscall: a random per-process prefix and a counter.

    Unique is what a request id needs (it is logged and echoed, never trusted); `uuid4()` or
    `os.urandom` cost a syscall per request on the success path.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count(int.from_bytes(os.urandom(4), "big"))

    def fresh(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


_REQUEST_IDS = _RequestIds()
os.register_at_fork(after_in_child=_REQUEST_IDS.reset)  # a forked worker never repeats ids
