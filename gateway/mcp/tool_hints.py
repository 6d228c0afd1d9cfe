"""What each server's `tools/list` says about a tool: whether a call may be repeated
(docs/rules.md#tool-annotations), and which arguments it requires (its inputSchema's
`required`: docs/rules.md#required-arguments).

The MCP schema's `ToolAnnotations`: `readOnlyHint` "If true, the tool does not modify its
environment"; `idempotentHint` "If true, calling the tool repeatedly with the same arguments
will have no additional effect on its environment" (meaningful when the tool is not
read-only); both default to false. Either one true makes the identical call safe to send
again, which is what a retry is: a failure of such a tool that may have reached what it
calls (a timeout, an unavailable API) can be retried, where for any other tool it cannot.

The schema asks clients to treat annotations as untrusted unless they come from a trusted
server; the gateway takes them from the server its operator put behind it, the one the
call goes to. A server that declares a tool read-only and is wrong about it gets its own
side effect repeated, as it would by any client that believes it.

Remembered per route (a stdio relay is one route) and tool name, the most recent listing
winning; at most `CAPACITY` tools, the least recently listed forgotten first, so a server
that lists a new tool name each time cannot grow the gateway's memory. A tool never listed
is not replay-safe, and requires nothing the gateway knows of.

A failed call that left out an argument the tool's inputSchema lists as `required` failed
for that, whatever the server's message says (a server that runs a command without it may
report the command's own failure, a refused connection even): the caller can fix it by
giving the argument, and no retry of the same call can succeed. Only the first
`REQUIRED_LIMIT` names of a schema are kept, each at most `NAME_LIMIT` characters long.

With a fleet store, what a listing through one replica (or worker) changes is told to the
others (`on_learned`, published through the store; `received` where it arrives), so a
session whose `tools/list` and `tools/call` reach different replicas is classified as on one
(docs/mcp.md#across-replicas). A listing that says what the book already holds costs nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CAPACITY = 4096
REQUIRED_LIMIT = 64
NAME_LIMIT = 128


@dataclass(frozen=True, slots=True)
class ToolFacts:
    """What one `tools/list` entry says that the classification uses."""

    replay_safe: bool
    required: tuple[str, ...] = ()


def replay_safe(tool: Any) -> bool:
    """One `tools/list` entry's annotations: read-only or idempotent, stated as true."""
    annotations = tool.get("annotations") if isinstance(tool, dict) else None
    if not isinstance(annotations, dict):
        return False
    return annotations.get("readOnlyHint") is True or annotations.get("idempotentHint") is True


def required_arguments(tool: Any) -> tuple[str, ...]:
    """The argument names one `tools/list` entry's inputSchema lists as `required`."""
    schema = tool.get("inputSchema") if isinstance(tool, dict) else None
    required = schema.get("required") if isinstance(schema, dict) else None
    if not isinstance(required, list):
        return ()
    names = (n for n in required if isinstance(n, str) and 0 < len(n) <= NAME_LIMIT)
    return tuple(dict.fromkeys(names))[:REQUIRED_LIMIT]


class ToolBook:
    """What the listings seen say of each tool of each route: safe to call again, and the
    arguments it requires."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._tools: OrderedDict[tuple[str, str], ToolFacts] = OrderedDict()
        self.on_learned: Callable[[str, dict[str, Any]], object] | None = None
        """Told what a listing changed, as JSON (the fleet store's publisher), if any."""

    def __len__(self) -> int:
        return len(self._tools)

    def learn(self, route: str, result: Any) -> None:
        """Note every tool a `tools/list` result names (one page of it, if paged)."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return
        listed = {}
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str):
                listed[name] = ToolFacts(replay_safe(tool), required_arguments(tool))
        changed = self._note(route, listed)
        if changed and self.on_learned is not None:
            told = {  # a name longer than a fleet event may carry stays this replica's
                n: {"replay_safe": f.replay_safe, "required": f.required}
                for n, f in changed.items()
                if len(n) <= NAME_LIMIT
            }
            self.on_learned(route, told)

    def received(self, route: str, tools: dict[str, Any]) -> None:
        """What another replica's listing changed (`on_learned`'s JSON there), checked as a
        listing is."""
        facts = {}
        for name, told in tools.items():
            if isinstance(name, str) and isinstance(told, dict):
                required = {"inputSchema": {"required": told.get("required")}}
                facts[name] = ToolFacts(
                    told.get("replay_safe") is True, required_arguments(required)
                )
        self._note(route, facts)

    def _note(self, route: str, tools: dict[str, ToolFacts]) -> dict[str, ToolFacts]:
        """`tools` of `route` as listed now; returns those that are new here."""
        changed = {}
        for name, facts in tools.items():
            key = (route, name)
            if self._tools.get(key) != facts:
                changed[name] = facts
            self._tools[key] = facts
            self._tools.move_to_end(key)
        while len(self._tools) > self.capacity:
            self._tools.popitem(last=False)
        return changed

    def is_replay_safe(self, route: str, tool: str | None) -> bool:
        facts = None if tool is None else self._tools.get((route, tool))
        return facts is not None and facts.replay_safe

    def missing_arguments(
        self, route: str, tool: str | None, given: frozenset[str]
    ) -> tuple[str, ...]:
        """The required arguments of the tool (as last listed) that the call did not give."""
        facts = None if tool is None else self._tools.get((route, tool))
        if facts is None:
            return ()
        return tuple(name for name in facts.required if name not in given)
