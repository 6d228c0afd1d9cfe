"""The exceptions an adapter raises for a failure it does not follow further, one per class.

    MendpointFailure            the base: `.decision` (what the gateway said) and `.calls`
      TransientFailure          retryable, but the attempts ran out or the delay was too long
      CorrectableFailure        `fix` (or a `run_fix` not run, or run without success)
      TerminalFailure           `stop`: no call will help; also a failure with no fields

docs/spec.md's three classes, so a caller catches the one it can act on.
"""

from __future__ import annotations

from typing import Any

from mendpoint_agents.decision import Action, Decision


class MendpointFailure(Exception):
    def __init__(self, decision: Decision, calls: int = 1, result: Any = None) -> None:
        super().__init__(decision.for_model())
        self.decision = decision
        self.calls = calls
        self.result = result
        """The last call's own result (an `httpx.Response`, a `CallToolResult`, …), if any."""


class TransientFailure(MendpointFailure):
    pass


class CorrectableFailure(MendpointFailure):
    pass


class TerminalFailure(MendpointFailure):
    pass


def failure_for(decision: Decision, calls: int = 1, result: Any = None) -> MendpointFailure:
    """The exception of the decision's class (the decision must not be `ok`)."""
    if decision.action is Action.RETRY:
        return TransientFailure(decision, calls, result)
    if decision.action in (Action.FIX, Action.RUN_FIX):
        return CorrectableFailure(decision, calls, result)
    return TerminalFailure(decision, calls, result)
