"""What each server's `tools/list` says about repeating a call (docs/rules.md#tool-annotations).

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
is not replay-safe.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

CAPACITY = 4096


def replay_safe(tool: Any) -> bool:
    """One `tools/list` entry's annotations: read-only or idempotent, stated as true."""
    annotations = tool.get("annotations") if isinstance(tool, dict) else None
    if not isinstance(annotations, dict):
        return False
    return annotations.get("readOnlyHint") is True or annotations.get("idempotentHint") is True


class ToolBook:
    """Which tools of which route are safe to call again, from the listings seen."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._safe: OrderedDict[tuple[str, str], bool] = OrderedDict()

    def __len__(self) -> int:
        return len(self._safe)

    def learn(self, route: str, result: Any) -> None:
        """Note every tool a `tools/list` result names (one page of it, if paged)."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str):
                continue
            key = (route, name)
            self._safe[key] = replay_safe(tool)
            self._safe.move_to_end(key)
        while len(self._safe) > self.capacity:
            self._safe.popitem(last=False)

    def is_replay_safe(self, route: str, tool: str | None) -> bool:
        return tool is not None and self._safe.get((route, tool), False)
