"""What watches every request from beside the data path: tracing and follow-ups, declared.

A request observer is told when a request begins, when it has a route (its hook may return
what to call with the answer's status), and when it has ended; the handler
(gateway/serve/handler.py) calls them in the order the app declared them (`declared`), and
names none. Each is off at the cost of one attribute read: tracing while no collector is
configured, follow-ups while `followups.enabled` is false.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from gateway.exchange.context import RequestContext
from gateway.feedback.followups import FollowupBook
from gateway.http.followup_watch import Watch
from gateway.telemetry.logs import AccessRecord
from gateway.telemetry.tracing import TRACING

Settle = Callable[[int], None]
"""Called once with the status the caller got."""


class RequestObserver(Protocol):
    def began(self, request: web.Request, record: AccessRecord) -> None: ...

    def routed(self, ctx: RequestContext, target: str) -> Settle | None: ...

    def ended(self, record: AccessRecord) -> None: ...


class Traces:
    """The exchange's spans (docs/operations.md#traces): the server span opens as the request
    begins and closes with the access record."""

    def began(self, request: web.Request, record: AccessRecord) -> None:
        if TRACING.on:
            record.trace = TRACING.begin(request)

    def routed(self, ctx: RequestContext, target: str) -> Settle | None:
        return None

    def ended(self, record: AccessRecord) -> None:
        if record.trace is not None:
            record.trace.end(record)


class Followups:
    """What callers do after a failure (docs/operations.md#follow-ups), on HTTP routes: a
    request may settle the open failure it follows, and may open one."""

    def __init__(self, book: FollowupBook) -> None:
        self.book = book

    def began(self, request: web.Request, record: AccessRecord) -> None:
        pass

    def routed(self, ctx: RequestContext, target: str) -> Settle | None:
        if not self.book.enabled or ctx.route.spec.type != "http":
            return None
        return Watch.begin(self.book, ctx, target).end

    def ended(self, record: AccessRecord) -> None:
        pass


def declared(book: FollowupBook) -> tuple[RequestObserver, ...]:
    """The request observers, in the order they are told."""
    return (Traces(), Followups(book))


REQUEST_OBSERVERS: web.AppKey[tuple[RequestObserver, ...]] = web.AppKey(
    "mendpoint_request_observers"
)
