"""pydantic-ai: the ladder on `MCPToolset(process_tool_call=...)`, and on plain tools.

    toolset = MCPToolset(client, process_tool_call=mendpoint_tool_calls())
    agent = Agent(model, toolsets=[toolset])

pydantic-ai raises a `ModelRetry` for every `isError` result and JSON-RPC error, and so
spends the tool's retries, and a model request each, on failures no retry can fix. Here:

    retry    called again in the hook after `retry_after_ms` (at most 3 calls in all): the
             model sees only the success; attempts or wait run out: `ToolFailed`
    run_fix  the `fix_command` run (only with `Policy(run_fix=...)`), then called again once
    fix      `ModelRetry` with the code, message and `fix_required`: the model changes the call
    stop     `ToolFailed`: the model sees the failure once, no retry spent
    nothing  a failure with no Mendpoint fields (`original` mode, no gateway) is raised as
             pydantic-ai raised it: the adapter adds nothing the gateway did not say

The hook sees a failure as pydantic-ai raised it: the `ModelRetry` (or `ToolFailed`) message
holds the result's text items, the gateway's `{"mendpoint_failure": ...}` among them
(`decide_text`), and a JSON-RPC error is its cause. `mendpoint_tool` gives plain tools that
call HTTP APIs through the gateway (with `mendpoint_agents.httpx`'s transport) the same
outcomes for the exceptions that transport raises.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from pydantic_ai import ModelRetry, RunContext, ToolFailed
from pydantic_ai.mcp import CallToolFunc, ProcessToolCallback, ToolResult

from mendpoint_agents.decision import OK, Action, Decision, Source
from mendpoint_agents.errors import MendpointFailure
from mendpoint_agents.ladder import Policy, follow
from mendpoint_agents.mcp_results import jsonrpc_error

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class _Attempt:
    value: Any
    failure: ModelRetry | ToolFailed | None


def mendpoint_tool_calls(policy: Policy | None = None) -> ProcessToolCallback:
    """A `process_tool_call` hook that follows the gateway's decision for each call."""
    rules = policy if policy is not None else Policy()

    def read(attempt: _Attempt) -> Decision:
        if attempt.failure is None:
            return OK
        cause = attempt.failure.__cause__
        if cause is not None and jsonrpc_error(cause) is not None:
            return rules.read(cause)
        return rules.read(attempt.failure.message)

    async def process_tool_call(
        ctx: RunContext[Any], call_tool: CallToolFunc, name: str, tool_args: dict[str, Any]
    ) -> ToolResult:
        async def call() -> _Attempt:
            try:
                return _Attempt(await call_tool(name, tool_args), None)
            except (ModelRetry, ToolFailed) as failure:
                return _Attempt(None, failure)

        outcome = await follow(call, read, rules)
        if outcome.decision.ok:
            result: ToolResult = outcome.result.value
            return result
        if outcome.decision.source is Source.NONE and outcome.result.failure is not None:
            raise outcome.result.failure  # the gateway said nothing: pydantic-ai's own way
        raise for_model(outcome.decision)

    return process_tool_call


def for_model(decision: Decision) -> ModelRetry | ToolFailed:
    """`fix` as a retry prompt (the model must change the call); everything else as a failed
    tool result the model sees once."""
    if decision.action in (Action.FIX, Action.RUN_FIX):
        return ModelRetry(decision.for_model())
    return ToolFailed(decision.for_model())


def mendpoint_tool(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A plain async tool whose HTTP calls go through `MendpointAsyncTransport` (which has
    already retried what was retryable): its `MendpointFailure`s become `ModelRetry` (`fix`)
    or `ToolFailed` (the rest). The signature is kept for pydantic-ai's schema."""
    if not inspect.iscoroutinefunction(function):
        raise TypeError("mendpoint_tool wraps async tools")

    @functools.wraps(function)
    async def tool(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await function(*args, **kwargs)
        except MendpointFailure as failure:
            raise for_model(failure.decision) from failure

    return tool
