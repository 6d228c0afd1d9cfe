"""Which argument of a tool call a failure's text is about
(docs/rules.md#arguments-named-in-a-failure), and which arguments carry a credential
(docs/rules.md#whose-credentials).

A tool's failure that is the caller's to fix usually says which argument is wrong, in one of
these ways, each read here against what the gateway knows of the call (the tool's
inputSchema `properties` from its server's tools/list, and the values the call sent):

- it *names* the argument: `Unsupported operation`, `path is a directory`, `Invalid url`
  (the name's words, `file_path` and `filePath` as "file path", appear in the text);
- it *echoes* what the caller sent for it, whole or a quoted part: `Shell operator ';' is
  not supported` for a command `echo a; ls`, `Is a directory: '/srv/data'`;
- the tool takes one argument only: whatever the caller got wrong, it is that one;
- it is *only* that value: a Python exception whose text is its argument (`KeyError`'s
  `'item-42'`, `FileNotFoundError` raised with the path alone) comes back from the SDK as
  `Error executing tool get: 'item-42'`, naming nothing else.

Texts are read up to `TEXT_LIMIT` characters; every pattern here is compiled once.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from itertools import pairwise
from urllib.parse import parse_qsl, unquote

TEXT_LIMIT = 4000
SHORT_NAME = 3
"""A one-word argument name shorter than this (`a`, `x`, `id`) is too common a word to say
that the text names it; its value can still be echoed."""
ECHO_MIN = 3
REQUEST_VALUES = 16
REQUEST_VALUE_LIMIT = 256
QUERY_LIMIT = 4096
"""A value shorter than this is too common a string to say the text echoes it unquoted."""

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_QUOTED = re.compile(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"|`([^`\n]{1,200})`")
_EXCEPTION_PREFIX = re.compile(r"\A(?:[A-Za-z_][\w.]{0,80}(?:Error|Exception)\s*:\s*)")
_QUOTES = "'\"`"

# The words of a credential in an argument's name: a key, token, secret or password the
# caller gives. Names of a pagination cursor or a count (page_token, max_tokens) are not.
_CREDENTIAL_WORDS = frozenset(
    {
        "token",
        "secret",
        "password",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "apikey",
        "authorization",
        "auth",
        "bearer",
        "pat",
    }
)
_CREDENTIAL_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key")})
_NOT_CREDENTIAL_WORDS = frozenset(
    {"page", "next", "continuation", "pagination", "cursor", "max", "count", "limit", "num"}
)


def words(text: str) -> list[str]:
    """The lower-case words of a text or a name (`file_path`, `filePath` and "File path"
    all give `file`, `path`)."""
    return [w.lower() for w in _WORD.findall(text)]


def is_credential(name: str) -> bool:
    """An argument whose name says it carries a credential (`api_key`, `apiKey`, `token`,
    `github_token`, `password`, `client_secret`, `authorization`)."""
    parts = words(name)
    if not parts or _NOT_CREDENTIAL_WORDS.intersection(parts):
        return False
    if _CREDENTIAL_WORDS.intersection(parts):
        return True
    return any(pair in _CREDENTIAL_PAIRS for pair in pairwise(parts))


def named_argument(
    text: str, names: Sequence[str], values: Sequence[tuple[str, str]]
) -> str | None:
    """The argument the text names (by its name's words), else the one whose value it
    echoes (`echoed_argument`), else the tool's only argument (a failure of what the caller
    sent can only be about that one); None when it is about none of them."""
    text = text[:TEXT_LIMIT]
    said = words(text)
    for name in names:
        parts = words(name)
        if not parts or (len(parts) == 1 and len(parts[0]) < SHORT_NAME):
            continue
        if _contains(said, parts):
            return name
    echoed = echoed_argument(text, values)
    if echoed is None and len(names) == 1:
        return names[0]
    return echoed


def echoed_argument(text: str, values: Sequence[tuple[str, str]]) -> str | None:
    """The argument whose value the text repeats: the whole value (at least `ECHO_MIN`
    characters), or a part the text quotes (`'…'`, `"…"`, `` `…` ``)."""
    text = text[:TEXT_LIMIT]
    for name, value in values:
        if len(value.strip()) >= ECHO_MIN and value.strip() in text:
            return name
    for found in _QUOTED.finditer(text):
        quoted = found.group(1) or found.group(2) or found.group(3)
        if not quoted.strip():
            continue
        for name, value in values:
            if quoted in value:
                return name
    return None


def query_values(query: str) -> tuple[tuple[str, str], ...]:
    """Each query parameter's value under its name, decoded: at most `REQUEST_VALUES`, of
    at most `REQUEST_VALUE_LIMIT` characters, so a long URL costs the error path no more than
    a short one."""
    found = [
        (name, value)
        for name, value in parse_qsl(query[:QUERY_LIMIT], keep_blank_values=False)
        if len(value) <= REQUEST_VALUE_LIMIT
    ]
    return tuple(found[:REQUEST_VALUES])


def path_values(path: str) -> tuple[tuple[str, str], ...]:
    """Each path segment as `path segment N` (1 first), decoded, bounded as `query_values`."""
    found = [
        (f"path segment {number}", unquote(segment))
        for number, segment in enumerate(path[:QUERY_LIMIT].split("/")[1:], 1)
        if segment and len(segment) <= REQUEST_VALUE_LIMIT
    ]
    return tuple(found[:REQUEST_VALUES])


def echoed_value(
    text: str, quoted: Sequence[tuple[str, str]], anywhere: Sequence[tuple[str, str]]
) -> str | None:
    """The name of the value the text repeats: one of `anywhere` it quotes whole (`'…'`,
    `"…"`, `` `…` ``, HTML's `&quot;` too) or holds unquoted (at least `ECHO_MIN`
    characters), else one of `quoted` it quotes whole. Stricter than `echoed_argument`: a
    quoted part of a value does not count, and a path segment (`items`) must be quoted, since
    error pages name their resource and quote many short strings (`'/'`, `"id"`)."""
    text = text[:TEXT_LIMIT]
    if "&" in text:
        text = html.unescape(text)
    said = [found.group(1) or found.group(2) or found.group(3) for found in _QUOTED.finditer(text)]
    for name, value in anywhere:
        if value in said or (len(value.strip()) >= ECHO_MIN and value in text):
            return name
    # Then a path segment, quoted whole: last, as a page names its resource (`"items"`).
    return next((name for name, value in quoted if value in said), None)


def only_argument(text: str, values: Sequence[tuple[str, str]]) -> str | None:
    """The argument whose value is all the text says (quotes, an exception's class name
    and a final full stop aside)."""
    said = _EXCEPTION_PREFIX.sub("", text.strip(), count=1).rstrip(".").strip()
    if len(said) >= 2 and said[0] == said[-1] and said[0] in _QUOTES:
        said = said[1:-1]
    if not said:
        return None
    for name, value in values:
        if value.strip() == said:
            return name
    return None


def _contains(said: list[str], parts: list[str]) -> bool:
    """`parts` appear in `said` one after another."""
    width = len(parts)
    first = parts[0]
    return any(
        said[i] == first and said[i : i + width] == parts for i in range(len(said) - width + 1)
    )


__all__ = [
    "echoed_argument",
    "echoed_value",
    "is_credential",
    "named_argument",
    "only_argument",
    "path_values",
    "query_values",
    "words",
]
