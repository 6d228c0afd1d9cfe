"""Following a decision before the model sees anything: the one loop every adapter runs.

    retry    sleep `retry_after_ms` (or the backoff when the gateway named no delay) and
             call again, up to `max_attempts` calls in all; a delay over `max_wait_ms` is
             not slept: the failure goes back as it is, its delay in the decision
    run_fix  run the `fix_command` (only when the caller gave a runner), and on success call
             again once; when it fails, or the call fails again, the decision becomes `fix`
    others   returned at once

A call is repeated only on `retry` (the gateway marked it `retryable`: the identical call
may succeed and nothing happened upstream) or after a fix the caller ran; a failure the
gateway did not mark retryable is never called again here. The caller's `call` and `read`
give the call and its decision; what the final decision becomes (a `ModelRetry`, a tool
message, an exception) is each adapter's own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from mendpoint_agents.decide import decide
from mendpoint_agents.decision import Action, Decision
from mendpoint_agents.fixes import FixRunner
from mendpoint_agents.http_answers import DEFAULT_PREFIX
from mendpoint_agents.mcp_results import DEFAULT_FAILURE_KEY

T = TypeVar("T")
MAX_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Policy:
    """How far an adapter follows the gateway's advice on its own."""

    max_attempts: int = MAX_ATTEMPTS
    """Calls in all for a retryable failure, the first included."""
    max_wait_ms: int = 30_000
    """A longer advised delay is not slept here: the failure goes to the caller with it."""
    backoff_ms: tuple[int, ...] = (250, 500, 1000)
    """The waits before the 2nd, 3rd, … call when the gateway named no delay."""
    run_fix: FixRunner | None = None
    """Opting in to `run_fix` (e.g. `mendpoint_agents.run_fix_command`); None: `fix`."""
    header_prefix: str = DEFAULT_PREFIX
    failure_key: str = DEFAULT_FAILURE_KEY

    def read(self, result: Any) -> Decision:
        """`decide` with this policy's opt-in, header prefix and failure key."""
        return decide(
            result,
            run_fixes=self.run_fix is not None,
            header_prefix=self.header_prefix,
            failure_key=self.failure_key,
        )

    def wait_ms(self, decision: Decision, attempt: int) -> int:
        if decision.retry_after_ms is not None:
            return decision.retry_after_ms
        return self.backoff_ms[min(attempt, len(self.backoff_ms)) - 1] if self.backoff_ms else 0


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """The last call's result and its decision; `calls` counts every call made."""

    result: T
    decision: Decision
    calls: int
    fixes_run: int = 0


async def follow(
    call: Callable[[], Awaitable[T]], read: Callable[[T], Decision], policy: Policy
) -> Outcome[T]:
    calls = fixes = 0
    while True:
        result = await call()
        calls += 1
        decision = read(result)
        step = _next(decision, policy, calls, fixes)
        if isinstance(step, Decision):
            return Outcome(result, step, calls, fixes)
        if step == "fix":
            fixes += 1
            assert policy.run_fix is not None and decision.fix_command is not None
            if not await asyncio.to_thread(policy.run_fix, decision.fix_command):
                return Outcome(result, replace(decision, action=Action.FIX), calls, fixes)
        else:
            await asyncio.sleep(policy.wait_ms(decision, calls) / 1000)


def follow_sync(call: Callable[[], T], read: Callable[[T], Decision], policy: Policy) -> Outcome[T]:
    calls = fixes = 0
    while True:
        result = call()
        calls += 1
        decision = read(result)
        step = _next(decision, policy, calls, fixes)
        if isinstance(step, Decision):
            return Outcome(result, step, calls, fixes)
        if step == "fix":
            fixes += 1
            assert policy.run_fix is not None and decision.fix_command is not None
            if not policy.run_fix(decision.fix_command):
                return Outcome(result, replace(decision, action=Action.FIX), calls, fixes)
        else:
            time.sleep(policy.wait_ms(decision, calls) / 1000)


def _next(decision: Decision, policy: Policy, calls: int, fixes: int) -> Decision | str:
    """The final decision, or what to do before calling again: "wait" or "fix"."""
    if decision.action is Action.RETRY:
        if calls < policy.max_attempts and policy.wait_ms(decision, calls) <= policy.max_wait_ms:
            return "wait"
        return decision
    if decision.action is Action.RUN_FIX:
        if policy.run_fix is not None and fixes == 0:
            return "fix"
        return replace(decision, action=Action.FIX)
    return decision
