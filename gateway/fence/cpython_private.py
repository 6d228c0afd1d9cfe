"""Every use of CPython's undocumented internals, in one place, each with the reason it is needed.

CPython may change a module that is not part of its documented API in any release (Python
3.11 moved `sre_parse` to `re._parser` and deprecated the old name). So the gateway touches
such names here and nowhere else, and tests/fence/test_cpython_private.py checks each one
against the running interpreter: an upgrade that changes one fails a test that names it,
instead of silently changing what the gateway does.

- `sre_parse` and `sre_constants` (`re._parser`, `re._constants`): the regex prefilter
  (`gateway.config.prefilter`) reads a rule's pattern as the `re` module parses it, to find
  words every match must contain, so a rule whose words are absent from a body is skipped
  without running the regex. Only the parsed tree's shape is read (opcodes, literals,
  subpatterns, the pattern's flags); a pattern it cannot read is simply not prefiltered.
- `scanstring` (`json.decoder.scanstring`, the C string scanner the `json` module decodes
  with): JSON insertion (`gateway.text.json_insert`) reads a member name where it stands in
  the upstream's text, without decoding the whole body, and gets exactly the decoder's
  unescaping and its errors.
- `FlowControlMixin` (`asyncio.streams.FlowControlMixin`, outside `asyncio.__all__`): the
  protocol a `StreamWriter` needs for `drain()` to wait on a paused transport. asyncio has
  no public way to get a `StreamWriter` over a pipe (`open_connection` is for sockets), so
  `mendpoint stdio` (its stdout) and the MCP child (its stdin, gateway/mcp/child.py) build
  one on `loop.connect_write_pipe` with this protocol, as asyncio's own subprocess streams
  do.
"""

from __future__ import annotations

import asyncio.streams
import json.decoder
from collections.abc import Callable
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
"""`scanstring(text, index_after_quote, strict)` → (the decoded string, the index after it)."""

FlowControlMixin: type[asyncio.Protocol] = asyncio.streams.FlowControlMixin
"""A write pipe's protocol with `drain()` support, for `asyncio.StreamWriter`."""

__all__ = ["FlowControlMixin", "scanstring", "sre_constants", "sre_parse"]
