"""LangChain: the ladder as a tool interceptor of `langchain-mcp-adapters`, and on plain
tools' `handle_tool_error`.

    client = MultiServerMCPClient(connections, tool_interceptors=[MendpointInterceptor()])
    agent = create_agent(model, await client.get_tools())

LangChain's MCP adapters hand an `isError` result to the model as a `ToolMessage` with
status "error" holding the result's text items (the gateway's `{"mendpoint_failure": ...}`
among them), to be re-read as prose; a JSON-RPC error is raised out of the tool and ends the
run. Here, in the interceptor (the handler may be called more than once):

    retry    called again after `retry_after_ms` (at most 3 calls in all): the model sees
             only the success
    run_fix  the `fix_command` run (only with `Policy(run_fix=...)`), then called again once
    fix      an error result whose one text is the code, message and `Fix required: ...`
    stop     the same, saying no call will help: the model sees the failure once
    nothing  a result with no Mendpoint fields is returned as the server sent it

The error result goes through the adapters' own error path: a `ToolMessage` with status
"error" (`handle_tool_errors=True`, their default), or the `ToolException` that carries the
same text. `mendpoint_tool` gives plain tools calling HTTP through the gateway (with
`mendpoint_agents.httpx`'s transport) the same text, on `handle_tool_error=True`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from langchain_core.tools import ToolException
from langchain_mcp_adapters.interceptors import MCPToolCallRequest, MCPToolCallResult
from mcp.types import CallToolResult, TextContent

from mendpoint_agents.decision import OK, Decision, Source
from mendpoint_agents.errors import MendpointFailure
from mendpoint_agents.ladder import Outcome, Policy, follow
from mendpoint_agents.mcp_results import jsonrpc_error

P = ParamSpec("P")
R = TypeVar("R")
Handler = Callable[[MCPToolCallRequest], Awaitable[MCPToolCallResult]]


class MendpointInterceptor:
    """A `ToolCallInterceptor` (langchain-mcp-adapters) that follows the gateway's decision
    for each call. Put it first in `tool_interceptors` so each retry runs the others again."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy if policy is not None else Policy()

    def read(self, result: MCPToolCallResult | Exception) -> Decision:
        if isinstance(result, CallToolResult | Exception):
            return self.policy.read(result)
        return OK  # a ToolMessage or Command another interceptor made: not the gateway's

    async def __call__(self, request: MCPToolCallRequest, handler: Handler) -> MCPToolCallResult:
        async def attempt() -> MCPToolCallResult | Exception:
            try:
                return await handler(request)
            except Exception as error:
                if jsonrpc_error(error) is None:
                    raise
                return error

        outcome: Outcome[MCPToolCallResult | Exception] = await follow(
            attempt, self.read, self.policy
        )
        result = outcome.result
        if outcome.decision.ok or outcome.decision.source is Source.NONE:
            if isinstance(result, Exception):
                raise result
            return result
        text = TextContent(type="text", text=outcome.decision.for_model())
        return CallToolResult(content=[text], isError=True)


def mendpoint_tool(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A plain async tool whose HTTP calls go through `MendpointAsyncTransport` (which has
    already retried what was retryable): its `MendpointFailure`s become a `ToolException`
    with the text the model gets, which `handle_tool_error=True` hands it as the tool's
    result. The signature is kept for LangChain's schema."""
    if not inspect.iscoroutinefunction(function):
        raise TypeError("mendpoint_tool wraps async tools")

    @functools.wraps(function)
    async def tool(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await function(*args, **kwargs)
        except MendpointFailure as failure:
            raise ToolException(failure.decision.for_model()) from failure

    return tool
