"""Tool results reported as successes whose text reads as a failure: noticed, never changed.

Some servers answer a failure with `isError: false` and the error in the text (an SQLite
server's `Database error: no such table: widgets`). The contract passes a success through
byte for byte, so the gateway never rewrites one unless a rule opts in
(`match.mcp.is_error: false`, docs/rules.md#failures-reported-as-successes). An operator can
only write that rule for a tool once they know it does this: such results are counted per tool
as a gaps signature of their own status, `mcp:reported_success` (docs/operations.md#gaps).

Noticing must cost a success next to nothing, since most results are successes: one bounded
byte scan of the response's first `SCAN_BYTES` for a text item that begins with a failure's
words. Only a response the scan picks out is parsed, and the words are checked again on the
decoded text, so a false pick costs one parse and is never counted.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.mcp.rewrite import text_items

REPORTED_SUCCESS = "mcp:reported_success"
"""The status of these signatures in /gaps, beside `mcp` (a tool error a default named)."""
SCAN_BYTES = 1024
"""How far into a response the scan looks: a result's first text item begins within it (the
SDKs write `content` first), and `bytes.find` over text costs ~3 µs a KiB at worst."""
MAX_NOTED_TEXT = 512
"""Characters of the text a signature is made from (the signature keeps fewer still)."""

# The words a failure begins with, in the forms servers write them: `Error: …`, `Failed to
# …`, `[ERROR] …`, `Traceback (most recent call last)`, `{"error": …}` as text, or up to
# three words naming what failed and a colon (`Database error: …`, `Query failed: …`,
# `Security violation: …`, `Key not found: …`).
# Whitespace is what JSON writes raw (space, tab) or escapes (`\n`, `\r`, `\t`), so the
# byte scan and the check on the decoded text agree (ASCII only, both case-insensitive).
_WORDS = (
    r"error|failed|failure|exception|traceback|unable to|cannot|can't|could not|couldn't"
    r"|invalid|denied|permission denied|access denied|forbidden|unauthorized|not found|no such"
)
_NAMED = r"(?:[a-z]{1,24} ){1,3}(?:error|failed|failure|exception|violation|not found):"
TEXT_KEY = b'"text"'
# Tried only where `"text"` stands (found by `bytes.find`, far cheaper than a regex's own
# search, which a case-insensitive pattern cannot start from a literal).
_TEXT_BEGINS = re.compile(
    rb'[ \t\n\r]*:[ \t\n\r]*"(?:[ \t]|\\[nrt])*(?:\[?(?:'
    + _WORDS.encode()
    + rb")\b|"
    + _NAMED.encode()
    + rb'|\{(?:[ \t]|\\[nrt])*\\"error\\")',
    re.IGNORECASE,
)
_BEGINS = re.compile(
    r"[ \t\n\r]*(?:\[?(?:" + _WORDS + r")\b|" + _NAMED + r'|\{[ \t\n\r]*"error")',
    re.IGNORECASE | re.ASCII,
)


def may_report_failure(raw: bytes) -> bool:
    """Could this response hold a result whose text begins with a failure's words?"""
    end = min(len(raw), SCAN_BYTES)
    at = raw.find(TEXT_KEY, 0, end)
    while at != -1:
        if _TEXT_BEGINS.match(raw, at + len(TEXT_KEY), end) is not None:
            return True
        at = raw.find(TEXT_KEY, at + len(TEXT_KEY), end)
    return False


def failure_text(result: dict[str, Any]) -> str | None:
    """The text of a result reported as a success when one of its text items begins with a
    failure's words (what its signature is made from), else None."""
    texts = text_items(result)
    if not any(_BEGINS.match(text) for text in texts):
        return None
    return "\n".join(texts)[:MAX_NOTED_TEXT]


def noted_message(tool: str | None, text: str) -> str:
    """A signature's message: per tool, since the rule that names it names its tool."""
    return f"{tool or '?'}: {text}"
