"""The words an MCP SDK wraps around a tool's own message, seen through
(docs/rules.md#the-sdks-wrapping).

A tool that raises gets its message back to the client inside its SDK's wording, and the
wording comes first, where a rule anchored at the start of the message would look:

- the Python SDK, 2.x `mcp/server/mcpserver/tools/base.py` (`Tool.run`) and 1.x
  `mcp/server/fastmcp/tools/base.py`: `ToolError(f"Error executing tool {self.name}: {exc}")`
  around an anticipated failure; a crash is only `Error executing tool NAME`, nothing after;
- FastMCP, `fastmcp/server/server.py`: `ToolError(f"Error calling tool {name!r}: {e}")`;
- the TypeScript SDK's `McpError` (`types.ts`): `` super(`MCP error ${code}: ${message}`) ``,
  which a server that catches one and returns `error.message` as text passes on;
- `String(error)` in JavaScript and many a Python server's `f"Error: {e}"`: `Error: `.

They nest (a tool that calls another, an `McpError` caught and wrapped again), so any run of
them is removed. Only a prefix followed by more text goes: a crash's bare `Error executing
tool NAME` is all the server said, and stays whole.
"""

from __future__ import annotations

import regex

_WRAPPER = regex.compile(
    r"""(?x)
    \A (?:
        Error\ executing\ tool\ [^\s:]{1,128}:\s+
      | Error\ calling\ tool\ '[^'\n]{1,128}':\s+
      | MCP\ error\ -?\d{1,6}:\s+
      | Error:\s+
    )++
    """
)


def inner_message(text: str) -> str:
    """The message with the SDKs' wrapping prefixes removed; the text itself when there are
    none, or when nothing would be left after them."""
    found = _WRAPPER.match(text)
    if found is None:
        return text
    rest = text[found.end() :]
    return rest if rest.strip() else text


__all__ = ["inner_message"]
