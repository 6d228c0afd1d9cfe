"""The request path's side of follow-up tracking (gateway.feedback.followups).

`Watch.begin` costs one dictionary lookup while no failure is open on the route; while one is,
a tuple hash and a byte read (`FollowupBook.may_follow`), and only for a request to a
failure's route, method and target is the caller identified and its open failure looked up.
Request bodies are digested as they stream (BLAKE2b in C) while tracking is on, since a request
is known to have failed only after its body has gone upstream; requests without a body pay
nothing. `Watch.end` settles the
failure this request follows and opens one if it failed, and writes both into the access line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from aiohttp import web

from gateway.exchange.context import RequestContext
from gateway.feedback.followups import Answered, Attempt, FollowupBook, OpenFailure, digest
from gateway.feedback.target_filter import where_of

CREDENTIAL_HEADERS = ("Authorization", "Cookie")
FOLLOWUP_BOOK = web.AppKey("mendpoint_followups", FollowupBook)


@dataclass(slots=True)
class Watch:
    book: FollowupBook
    ctx: RequestContext
    target: str
    followed: OpenFailure | None = None
    _key: str | None = None
    _where: int | None = None

    @classmethod
    def begin(cls, book: FollowupBook, ctx: RequestContext, target: str) -> Watch:
        watch = cls(book, ctx, target)
        if ctx.request.body_exists:
            ctx.body_hasher = hashlib.blake2b(digest_size=16)
        route = ctx.route.spec.name
        if book.watching(route) and book.may_follow(route, watch.where):
            watch.followed = book.pending(watch.key)
        return watch

    @property
    def where(self) -> int:
        """Its `where_of` slot: a failure it could follow has the same."""
        if self._where is None:
            route, method = self.ctx.route.spec.name, self.ctx.request.method
            self._where = where_of(route, method, self.target)
        return self._where

    @property
    def key(self) -> str:
        """Caller, route, method and target (path and query), as one digest."""
        if self._key is None:
            request = self.ctx.request
            self._key = digest(
                caller_of(self.ctx), self.ctx.route.spec.name, request.method, self.target
            )
        return self._key

    def end(self, status: int) -> None:
        record = self.ctx.record
        # With a fleet store, on a route with failures open, a success that follows none this
        # process has heard of is told to the store, which may hold one (docs/operations.md#fleet).
        shared = self.book.shared is not None and self.book.watching(self.ctx.route.spec.name)
        if self.followed is None and shared:
            self.followed = self._news_since_begin()
        if self.followed is None and record.failure_code is None and not shared:
            return
        route = self.ctx.route.spec.name
        attempt = Attempt(self.key, self._identity(), route, record.started, self.where)
        answered = Answered(
            status,
            record.failure_code,
            record.rule,
            bool(record.retryable),
            record.retry_after_ms,
            record.fix_required,
        )
        settled = self.book.settle(attempt, answered, record.request_id, self.followed)
        if settled is not None:
            record.follows, record.followup = settled.follows, settled.outcome.value

    def _news_since_begin(self) -> OpenFailure | None:
        """With a fleet store, a failure another process answered before this request began
        may be heard of only while it runs: it is still the one this request follows
        (docs/operations.md#fleet). This process's own were all known at the start."""
        entry = self.book.pending(self.key)
        return entry if entry is not None and entry.origin != self.book.origin else None

    def _identity(self) -> str:
        """The key plus what makes a request different: its body and its credentials."""
        headers = self.ctx.request.headers
        names = (*CREDENTIAL_HEADERS, *credential_headers_of(self.ctx))
        hasher = self.ctx.body_hasher
        body = hasher.digest() if hasher is not None else b""
        return digest(self.key, body, *(f"{n}:{headers.getall(n, [])}" for n in names))


def caller_of(ctx: RequestContext) -> str:
    """The caller's configured name, else its address and User-Agent."""
    name = ctx.caller.name
    if name is not None:
        return f"name:{name}"
    agent = ctx.request.headers.get("User-Agent", "")
    return f"peer:{ctx.request.remote}\0{agent}"


def credential_headers_of(ctx: RequestContext) -> tuple[str, ...]:
    directory = ctx.state.callers
    names = (directory.header, directory.scopes_header)
    return tuple(n for n in names if n)
