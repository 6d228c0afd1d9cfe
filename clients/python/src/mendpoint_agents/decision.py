"""The agent's procedure as data: the five actions, a `Decision`, and the ladder that picks one.

docs/spec.md ("What the agent does", "Classes") in one function, `choose`: every reader of a
shape (`mendpoint_agents.reading`) gathers the same few fields into `Fields` and asks it.

    retryable                          -> retry   (sleep retry_after_ms, call again, <= 3 calls)
    fix_command, and the caller opted in -> run_fix (run it; exit 0: call again once)
    fix_required                       -> fix     (the model changes the call)
    anything else                      -> stop    (the error goes to the model once, verbatim)

Nothing here is inferred: a field the gateway did not write is absent, and absence never
turns into a retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    OK = "ok"
    RETRY = "retry"
    RUN_FIX = "run_fix"
    FIX = "fix"
    STOP = "stop"


class Source(StrEnum):
    """Which shape a decision was read from (docs/agents.md, the decision table)."""

    SUCCESS = "success"
    ENVELOPE = "envelope"
    ADDITIVE = "additive"
    """A JSON body with the fields in its `error` object."""
    ADDITIVE_FAILURE = "additive-failure"
    """A JSON body whose own `error` is not an object: the fields are under `failure`."""
    HEADERS = "headers"
    TOOL_RESULT = "tool-result"
    JSONRPC_ERROR = "jsonrpc-error"
    TEXT = "text"
    """The failure item found in text a framework handed over (it dropped `_meta`)."""
    NONE = "none"
    """A failure with no Mendpoint fields at all: `original` mode, or no gateway."""


@dataclass(frozen=True, slots=True)
class Fields:
    """The fields of `error` the procedure reads, as the gateway wrote them (or None)."""

    code: str | None
    retryable: bool
    retry_after_ms: int | None = None
    fix_required: str | None = None
    fix_command: str | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after one call. `retry_after_ms` is set only with `retry`; `fix_required`
    and `fix_command` are the gateway's strings, verbatim."""

    action: Action
    code: str | None = None
    retry_after_ms: int | None = None
    fix_required: str | None = None
    fix_command: str | None = None
    message: str = ""
    source: Source = Source.NONE

    @property
    def ok(self) -> bool:
        return self.action is Action.OK

    def for_model(self) -> str:
        """The text a model gets for this failure: the code and message, and what to change
        (`fix`) or that no call will help (`stop`). Only the gateway's own words."""
        head = f"{self.code}: {self.message}" if self.code else self.message
        if self.action in (Action.FIX, Action.RUN_FIX):
            text = f"{head}\nFix required: {self.fix_required}"
            if self.fix_command:
                text += f"\nFix command: {self.fix_command}"
            return text + "\nChange the call as the fix says, then call the tool again."
        if self.action is Action.RETRY:
            wait = "" if self.retry_after_ms is None else f" after {self.retry_after_ms} ms"
            return f"{head}\nRetryable: the identical call may succeed{wait}."
        if self.action is Action.STOP:
            return f"{head}\nNot retryable and nothing to fix: do not call again; report it."
        return head


OK = Decision(Action.OK, source=Source.SUCCESS)


def choose(fields: Fields, source: Source, *, run_fixes: bool = False) -> Decision:
    """The ladder (docs/spec.md, What the agent does) over one failure's fields."""
    if fields.retryable:
        return Decision(
            Action.RETRY, fields.code, fields.retry_after_ms, message=fields.message, source=source
        )
    if fields.fix_command and fields.fix_required and run_fixes:
        action = Action.RUN_FIX
    elif fields.fix_required:
        action = Action.FIX
    else:
        return Decision(Action.STOP, fields.code, message=fields.message, source=source)
    return Decision(
        action,
        fields.code,
        None,
        fields.fix_required,
        fields.fix_command,
        fields.message,
        source,
    )


def stop_with(text: str, source: Source = Source.NONE, code: str | None = None) -> Decision:
    """A failure the procedure cannot read further: stop, with its text as the message."""
    return Decision(Action.STOP, code, message=text, source=source)
