"""The message of an HTML or plain-text error page: its heading and first paragraph (or its
first line), never its source.

Flask, Django and Express answer errors with HTML by default. The page's `<h1>` (else
`<title>`) says what failed and its first `<p>` or `<pre>` says why; scripts, styles and
everything after the first stack frame are dropped, and file paths are masked, so a debug
page's traceback never becomes an agent's `message`. Parsing uses the standard library's
`html.parser` on at most `SCAN_CHARS` of the page (stopping as soon as heading and detail are
found), which unescapes entities as it goes.
"""

from __future__ import annotations

from html.parser import HTMLParser

import regex

SCAN_CHARS = 16 * 1024  # past the longest head of a framework error page (Django debug: ~9 KiB)
CHUNK_CHARS = 2048
DETAIL_LIMIT = 500
SKIPPED = frozenset({"script", "style", "noscript", "template", "svg"})
BREAKS = frozenset({"br", "hr", "li", "tr", "div"})
GENERIC_HEADINGS = frozenset({"", "error", "oops", "oops!", "http error", "server error"})
HTML_TYPES = ("text/html", "application/xhtml+xml")

# Where a stack trace starts: Python, JavaScript/Java/.NET, PHP and Ruby frames.
_TRACE = regex.compile(
    r"Traceback \(most recent call last\)|(?m:^\s*at\s+\S)|\s{2,}at\s+\S+\s*\(|"
    r"\bat\s+(?:\S+\s+\()?(?:/|[A-Za-z]:\\|file:|node:)\S*:\d+|"
    r"File \"[^\"]+\", line \d+|(?m:^\s*#\d+\s+/)|(?m:^\s*from\s+/\S+:\d+)"
)
_SOURCE_EXT = (
    r"py|pyc|js|mjs|cjs|ts|tsx|jsx|rb|erb|java|kt|scala|php|go|cs|ex|exs|rs|c|cc|cpp|h|pl|"
    r"lua|dart|swift|class|jar"
)
_PATH = regex.compile(
    r"file://\S+"
    r"|[A-Za-z]:\\[^\s:\"'<>]+"
    rf"|(?<![\w/.@+~-])(?:/[\w.@+~-]+)+\.(?:{_SOURCE_EXT})\b(?::\d+)*"
    r"|/(?:home|usr|var|opt|srv|root|tmp|etc|Users|private|proc|nix)/[^\s:\"'<>)]*"
    # From a token's start only: `\S*` tried at every offset of a long token is quadratic.
    r"|(?<!\S)\S*?(?:node_modules|site-packages|dist-packages)\S*"
)
_SPACES = regex.compile(r"[ \t\r\f\v\u00a0]+")
_STATUS_PREFIX = regex.compile(
    r"(?i)^(?:HTTP(?:\s+(?:Status|Error))?\s*)?[1-5]\d\d\b[\s:.\-\u2013\u2014]*"
)


def looks_like_html(content_type: str, text: str) -> bool:
    if any(t in content_type.lower() for t in HTML_TYPES):
        return True
    start = text[:64].lstrip().lower()
    return start.startswith(("<!doctype html", "<html"))


def looks_like_plain_text(content_type: str, text: str) -> bool:
    """A text body with no markup: `text/plain`, an `html` type holding no tag (Express's
    `res.send("…")`), or no type at all for something that is neither markup nor JSON."""
    lowered = content_type.lower()
    head = text[:1024]
    if lowered.startswith("text/plain"):
        return not looks_like_html("", text)
    if any(t in lowered for t in HTML_TYPES):
        return "<" not in head
    return not lowered and head.lstrip()[:1] not in ("<", "{", "[")


def text_message(text: str) -> str | None:
    """The first line of a plain-text error body (Go's `http.Error`, Express's `res.send`),
    cut before any stack trace, paths masked; None when nothing is left."""
    return _clean(text[:SCAN_CHARS]) or None


def html_message(text: str) -> str | None:
    """`"Not Found: The requested URL was not found on the server."`, or None."""
    page = _PageText()
    try:
        # In chunks, stopping once heading and detail are found: they sit near the top, and
        # a debug page's megabyte of traceback markup is never parsed.
        for start in range(0, min(len(text), SCAN_CHARS), CHUNK_CHARS):
            page.feed(text[start : min(start + CHUNK_CHARS, SCAN_CHARS)])
            if page.complete:
                break
        page.close()
    except (AssertionError, ValueError):  # html.parser gives up on some malformed markup
        pass
    heading = _heading(page.h1) or _heading(page.title)
    detail = _clean(page.detail)
    if heading and detail and not detail.startswith(heading) and heading not in detail:
        message = f"{heading}: {detail}"
    else:
        message = detail or heading
    return message or None


def scrub(text: str) -> str:
    """Everything before the first stack frame, with file paths masked."""
    found = _TRACE.search(text)
    if found is not None:
        text = text[: found.start()]
    masked: str = _PATH.sub("…", text)
    return masked


def _heading(text: str) -> str:
    """A heading without its status number ("502 Bad Gateway" → "Bad Gateway"), or "" when
    nothing else is left ("HTTP Status 500", "Error"): the status is known already."""
    heading = _STATUS_PREFIX.sub("", _clean(text))
    return "" if heading.lower() in GENERIC_HEADINGS else heading


def _clean(text: str) -> str:
    # The first line only, bounded before any regex runs: a 16 KiB line of one token must
    # not cost the event loop more than a short one does.
    first = scrub(text.strip().split("\n", 1)[0][: DETAIL_LIMIT * 4]).strip()
    first = str(_SPACES.sub(" ", first)).strip(" :-")
    return first if len(first) <= DETAIL_LIMIT else first[: DETAIL_LIMIT - 1] + "…"


class _PageText(HTMLParser):
    """Collects the title, the first h1, and the first p or pre (whichever comes first)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.h1 = ""
        self.detail = ""
        self._skip = 0
        self._open: str | None = None  # the element being collected
        self._buffer: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in SKIPPED:
            self._skip += 1
        elif self._open is not None and tag in BREAKS:
            self._buffer.append("\n")
        elif self._open is None and self._wanted(tag):
            self._open, self._buffer = tag, []

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._open is not None and tag in BREAKS:
            self._buffer.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIPPED:
            self._skip = max(0, self._skip - 1)
        elif tag == self._open:
            self._store(tag, "".join(self._buffer))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None and not self._skip:
            text = data if self._open == "pre" else data.replace("\n", " ")
            self._buffer.append(text)

    @property
    def complete(self) -> bool:
        """Everything a message needs has been seen: a detail, and an h1 or a title."""
        return bool(self.detail and (self.h1 or self.title))

    def close(self) -> None:
        super().close()
        if self._open is not None:  # a page cut at SCAN_CHARS: keep what was read
            self._store(self._open, "".join(self._buffer))

    def _wanted(self, tag: str) -> bool:
        if tag == "title":
            return not self.title
        if tag == "h1":
            return not self.h1
        return tag in ("p", "pre") and not self.detail

    def _store(self, tag: str, text: str) -> None:
        if not text.strip():
            return
        if tag == "title":
            self.title = text
        elif tag == "h1":
            self.h1 = text
        else:
            self.detail = text


__all__ = ["html_message", "looks_like_html", "looks_like_plain_text", "scrub", "text_message"]
