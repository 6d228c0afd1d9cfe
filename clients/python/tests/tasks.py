"""The tasks the agents' tests and benchmark give an agent, and the scripted model's mind.

One task per failure class and transport: the tool the agent calls, its first arguments,
and the arguments a model that read the fix would send. No LLM runs: each framework's own
scripted-model hook (pydantic-ai's `FunctionModel`, an Agents SDK `Model`, a LangChain chat
model) asks `next_move` what to do with the last thing it was handed. The mind is the same
for every framework, with and without the adapters, and as naive as a model that trusts
what it reads:

    a success                          answer, done
    a failure the framework marks as   answer, done (pydantic-ai's `ToolFailed` outcome)
    final
    text that names the task's fix     call again with the fixed arguments
    text that says not to call again   answer, done
    any other failure text             call again, identically (what "Please try again"
                                       and a bare error message lead a model to), at most
                                       MAX_CALLS calls of the tool in all

`THINK_S` stands for the time a model takes to answer (the benchmark sets it; tests keep 0).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

MAX_CALLS = 4
STOP_PHRASE = "do not call again"
FINAL = "final"
Transport = Literal["mcp", "http"]
FailureClass = Literal["transient", "correctable", "terminal"]


@dataclass(frozen=True)
class Task:
    name: str
    transport: Transport
    failure: FailureClass
    tool: str
    arguments: dict[str, Any]
    fixed: dict[str, Any] | None = None
    fix_hint: str | None = None
    """A phrase of the gateway's `fix_required` a model would act on."""
    path: str = ""
    """Where an HTTP task's calls land on the orders API (counted in its hits)."""

    def prompt(self) -> str:
        return f"Call {self.tool} with {json.dumps(self.arguments)}."


def tasks(transport: Transport) -> list[Task]:
    """A fresh set (a new rate-limit key each time), one task per failure class."""
    key = uuid.uuid4().hex[:8]
    if transport == "mcp":
        return [
            Task("search", "mcp", "transient", "search", {"query": key}),
            Task(
                "read_note",
                "mcp",
                "correctable",
                "read_note",
                {"name": "todo"},
                {"name": "hello"},
                "Use a path that exists",
            ),
            Task("frobnicate", "mcp", "terminal", "frobnicate", {}),
        ]
    return [
        Task("quota", "http", "transient", "quota", {"key": key}, path=f"/quota/{key}"),
        Task(
            "create_order",
            "http",
            "correctable",
            "create_order",
            {"qty": 0},
            {"qty": 3},
            "Correct the request as the message describes",
            "/orders",
        ),
        Task("get_item", "http", "terminal", "get_item", {"item": 9}, path="/items/9"),
    ]


@dataclass
class Mind:
    """The scripted model's memory of one task: the calls it made and what it read."""

    task: Task
    calls: int = 0
    read: list[str] = field(default_factory=list)

    def next_move(self, feedback: str | None, final_failure: bool = False) -> dict[str, Any] | str:
        """The arguments of the next call, or FINAL. `feedback` is the text of the last tool
        result (None before the first call)."""
        if feedback is None:
            return self._call(self.task.arguments)
        self.read.append(feedback)
        if final_failure or self._succeeded(feedback):
            return FINAL
        if self.task.fix_hint is not None and self.task.fix_hint in feedback:
            assert self.task.fixed is not None
            return self._call(self.task.fixed)
        if STOP_PHRASE in feedback or self.calls >= MAX_CALLS:
            return FINAL
        return self._call(self.task.arguments)

    def _call(self, arguments: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return dict(arguments)

    def succeeded(self) -> bool:
        """The task's last tool result was a success."""
        return bool(self.read) and self._succeeded(self.read[-1])

    def _succeeded(self, feedback: str) -> bool:
        return any(mark in feedback for mark in SUCCESS_MARKS)


SUCCESS_MARKS = ("notes match", "hello, world", "you are agent", '"remaining"', '"id"')
"""What the tasks' successes say (tools_server.py, orders_api.py): a failure never does."""


@dataclass
class Run:
    """What one task cost one agent."""

    framework: str
    adapter: bool
    task: str
    transport: Transport
    failure: FailureClass
    model_requests: int
    tool_calls: int
    succeeded: bool
    seconds: float
    read: list[str]

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class Calls:
    """Counts the calls that reached the tools server or the API: the server appends one
    line per call to a file ($TOOLS_CALLS_FILE), the API counts its hits."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def of(self, tool: str) -> int:
        if not self.path.exists():
            return 0
        return sum(1 for line in self.path.read_text().splitlines() if line == tool)
