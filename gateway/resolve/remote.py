"""Calling a remote resolver: validated answers, a circuit breaker and a bounded TTL cache.

The request carries only the failure, the caller's scopes and the operation: never the
caller's `Authorization`, `Cookie` or API key. Its one credential is the gateway's own bearer
token (`resolver.token_file`), which `mendpoint resolver --token-file` checks. A resolver
that errors, hangs, redirects, answers garbage or too much (or 401) is a failure like any
other: the breaker counts it, and the gateway sends the failure without options.
"""

from __future__ import annotations

import hashlib
import ssl

import aiohttp
from pydantic import ValidationError

from gateway.resolve.breaker import (
    CacheKey,
    CircuitBreaker,
    CircuitOpen,
    ResolverUnavailable,
    TTLCache,
    Unsendable,
)
from gateway.resolve.local import ResolveQuery
from gateway.resolve.wire import (
    MAX_NAME_CHARS,
    MAX_ROUTE_CHARS,
    ResolveRequest,
    ResolveResponse,
    WireCaller,
    WireContext,
    WireFailure,
    WireOption,
    fitted,
)
from gateway.text.capped_read import read_capped

MAX_RESPONSE_BYTES = 256 * 1024


class RemoteResolver:
    def __init__(
        self,
        url: str,
        timeout_s: float,
        breaker: CircuitBreaker,
        cache: TTLCache,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.breaker = breaker
        self.cache = cache
        self._headers = {"Content-Type": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._tls: ssl.SSLContext | bool = tls if tls is not None else True
        self._session: aiohttp.ClientSession | None = None

    async def fetch(
        self, query: ResolveQuery, route: str | None, tool: str | None
    ) -> tuple[WireOption, ...]:
        key = cache_key(query)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        body = request_for(query, route, tool)  # before the breaker: not the resolver's fault
        if not self.breaker.allow():
            raise CircuitOpen("circuit open")
        try:
            options = await self._post(body)
        except (ResolverUnavailable, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.breaker.failure()
            raise ResolverUnavailable(str(exc) or type(exc).__name__) from exc
        self.breaker.success()
        self.cache.put(key, options)
        return options

    async def _post(self, body: ResolveRequest) -> tuple[WireOption, ...]:
        session = self._client()
        async with session.post(
            self.url,
            data=body.model_dump_json().encode(),
            headers=self._headers,
            allow_redirects=False,
            ssl=self._tls,
        ) as response:
            if response.status == 401:
                raise ResolverUnavailable(
                    "resolver answered 401: its token and resolver.token_file "
                    "(or MENDPOINT_RESOLVER_TOKEN_FILE) differ"
                )
            if response.status != 200:
                raise ResolverUnavailable(f"resolver answered {response.status}")
            raw, complete = await read_capped(response.content, MAX_RESPONSE_BYTES)
            if not complete:
                raise ResolverUnavailable("resolver answer too large")
        try:
            parsed = ResolveResponse.model_validate_json(raw)
        except ValidationError as exc:
            message = f"invalid resolver answer ({exc.error_count()} errors)"
            raise ResolverUnavailable(message) from exc
        return tuple(parsed.options)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                raise_for_status=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def request_for(query: ResolveQuery, route: str | None, tool: str | None) -> ResolveRequest:
    """The wire request for `query`: the context's names cut to the wire's limits. Anything
    else the wire refuses (a code or intent a config let through) is `Unsendable`: no
    options for this failure, and nothing counted against the breaker."""
    try:
        return ResolveRequest(
            failure=WireFailure(category=query.category, code=query.code, intent=query.intent),
            caller=WireCaller(scopes=sorted(query.scopes)),
            context=WireContext(
                route=fitted(route, MAX_ROUTE_CHARS),
                operation=fitted(query.operation, MAX_NAME_CHARS) or "",
                tool=fitted(tool, MAX_NAME_CHARS),
            ),
        )
    except ValidationError as exc:
        raise Unsendable(
            f"the request does not fit the wire ({exc.error_count()} errors)"
        ) from None


def cache_key(query: ResolveQuery) -> CacheKey:
    scopes = hashlib.sha256("\n".join(sorted(query.scopes)).encode()).hexdigest()[:16]
    return (scopes, query.category.value, query.code, query.intent, query.operation)
