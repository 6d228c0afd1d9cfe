"""httpx transports that apply the ladder to HTTP APIs behind the gateway.

    client = httpx.Client(transport=MendpointTransport())            # or AsyncClient with
    client.get(url)   # 2xx/3xx: the response, untouched             # MendpointAsyncTransport

A failure (status >= 400) is read whole and decided (`mendpoint_agents.decide`, any of the
four modes): `retry` is followed here (the request sent again after the advised delay, at
most `Policy.max_attempts` times in all), `run_fix` too when the caller gave a runner;
anything else raises the exception of its class (`mendpoint_agents.errors`), the last
response in `.result`. A request's body is read before it is sent, so a retry can send it
again. Successes are neither read nor parsed here.
"""

from __future__ import annotations

import httpx

from mendpoint_agents.decision import OK, Decision
from mendpoint_agents.errors import failure_for
from mendpoint_agents.ladder import Policy, follow, follow_sync


class MendpointTransport(httpx.BaseTransport):
    def __init__(self, transport: httpx.BaseTransport | None = None, policy: Policy | None = None):
        self.inner = transport if transport is not None else httpx.HTTPTransport()
        self.policy = policy if policy is not None else Policy()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()

        def call() -> httpx.Response:
            response = self.inner.handle_request(request)
            if response.status_code >= 400:
                response.read()
            return response

        outcome = follow_sync(call, self._read, self.policy)
        if outcome.decision.ok:
            return outcome.result
        raise failure_for(outcome.decision, outcome.calls, outcome.result)

    def _read(self, response: httpx.Response) -> Decision:
        return OK if response.status_code < 400 else self.policy.read(response)

    def close(self) -> None:
        self.inner.close()


class MendpointAsyncTransport(httpx.AsyncBaseTransport):
    def __init__(
        self, transport: httpx.AsyncBaseTransport | None = None, policy: Policy | None = None
    ):
        self.inner = transport if transport is not None else httpx.AsyncHTTPTransport()
        self.policy = policy if policy is not None else Policy()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()

        async def call() -> httpx.Response:
            response = await self.inner.handle_async_request(request)
            if response.status_code >= 400:
                await response.aread()
            return response

        outcome = await follow(call, self._read, self.policy)
        if outcome.decision.ok:
            return outcome.result
        raise failure_for(outcome.decision, outcome.calls, outcome.result)

    def _read(self, response: httpx.Response) -> Decision:
        return OK if response.status_code < 400 else self.policy.read(response)

    async def aclose(self) -> None:
        await self.inner.aclose()
