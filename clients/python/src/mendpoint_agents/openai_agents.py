"""The OpenAI Agents SDK: the ladder on an MCP server's `call_tool` and on the tool error
function (`failure_error_function`).

    server = MendpointMCPServerStdio(params={"command": "mendpoint", "args": [...]})
    agent = Agent(name="a", model=model, mcp_servers=[server])

The SDK hands an `isError` result to the model as plain text, and turns exceptions into the
text of its default error function, "An error occurred while running the tool. Please try
again.", whatever failed. Here:

    retry    `call_tool` calls again after `retry_after_ms` (at most 3 calls in all): the
             model sees only the success
    run_fix  the `fix_command` run (only with `policy=Policy(run_fix=...)`), then called again
    fix      a `MendpointFailure` the error function renders: code, message, `Fix required`
    stop     the same, saying no call will help
    nothing  a result with no Mendpoint fields is returned as the server sent it

`MendpointMCPServerStdio` and `MendpointMCPServerStreamableHttp` are the SDK's servers with
that `call_tool` and, unless one is given, `mendpoint_failure_error` as their error
function. `mendpoint_failure_error` also serves `@function_tool(failure_error_function=...)`
tools calling HTTP APIs through `mendpoint_agents.httpx`'s transport, which raises the same
exceptions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agents import RunContextWrapper
from agents.exceptions import UserError
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.tool import default_tool_error_function
from mcp.types import CallToolResult

from mendpoint_agents.decision import Source
from mendpoint_agents.errors import MendpointFailure, failure_for
from mendpoint_agents.ladder import Outcome, Policy, follow
from mendpoint_agents.mcp_results import jsonrpc_error

Call = Callable[[], Awaitable[CallToolResult]]


async def follow_call(call: Call, policy: Policy) -> CallToolResult:
    """The call, followed: its result when it succeeded or the gateway said nothing, else
    the `MendpointFailure` of the decision's class. A JSON-RPC error is read as well."""

    async def attempt() -> CallToolResult | Exception:
        try:
            return await call()
        except Exception as error:
            if jsonrpc_error(error) is None:
                raise
            return error

    outcome: Outcome[CallToolResult | Exception] = await follow(attempt, policy.read, policy)
    result = outcome.result
    if outcome.decision.ok or outcome.decision.source is Source.NONE:
        if isinstance(result, Exception):
            raise result
        return result
    failure = failure_for(outcome.decision, outcome.calls, result)
    raise MendpointToolError(str(failure)) from failure


class MendpointToolError(UserError):
    """What `call_tool` raises for a failure it does not follow further, its cause the
    `MendpointFailure`: the SDK passes its `UserError`s to the tool error function as they
    are (any other exception it logs as an error and wraps)."""


def mendpoint_failure_error(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """The tool error function: a `MendpointFailure` (the SDK wraps it in its own error) as
    the text the model gets; any other error as the SDK's default says it."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, MendpointFailure):
            return cause.decision.for_model()
        cause = cause.__cause__
    return default_tool_error_function(ctx, error)


class MendpointMCPServerStdio(MCPServerStdio):
    def __init__(self, *args: Any, policy: Policy | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("failure_error_function", mendpoint_failure_error)
        super().__init__(*args, **kwargs)
        self.policy = policy if policy is not None else Policy()

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        return await follow_call(
            lambda: super(MendpointMCPServerStdio, self).call_tool(tool_name, arguments, meta),
            self.policy,
        )


class MendpointMCPServerStreamableHttp(MCPServerStreamableHttp):
    def __init__(self, *args: Any, policy: Policy | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("failure_error_function", mendpoint_failure_error)
        super().__init__(*args, **kwargs)
        self.policy = policy if policy is not None else Policy()

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        return await follow_call(
            lambda: super(MendpointMCPServerStreamableHttp, self).call_tool(
                tool_name, arguments, meta
            ),
            self.policy,
        )
