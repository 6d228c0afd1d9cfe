"""The message of an HTML, plain-text or XML error page: its heading and first paragraph (or
its first line, or its `<Message>`, `<faultstring>` or `<Reason>`), never its source.

Flask, Django and Express answer errors with HTML by default. The page's `<h1>` (else
`<title>`) says what failed and its first `<p>` or `<pre>` says why; scripts, styles and
everything after the first stack frame are dropped, and file paths are masked, so a debug
page's traceback never becomes an agent's `message`. Parsing uses the standard library's
`html.parser` on at most `SCAN_CHARS` of the page (stopping as soon as heading and detail are
found), which unescapes entities as it goes.

A banner that only repeats the status ("503 Service Unavailable", "Error: 400 Bad Request",
"⚠️ 503 — Service Unavailable") says nothing the status does not: the words after it are
the message (docs/rules.md#errormessage).
"""

from __future__ import annotations

import html
from html.parser import HTMLParser
from http import HTTPStatus

import regex

SCAN_CHARS = 16 * 1024  # past the longest head of a framework error page (Django debug: ~9 KiB)
CHUNK_CHARS = 2048
DETAIL_LIMIT = 500
SKIPPED = frozenset({"script", "style", "noscript", "template", "svg"})
BREAKS = frozenset({"br", "hr", "li", "tr", "div"})
VOID = frozenset({"br", "hr", "img", "meta", "link", "input", "wbr", "col", "area", "base"})
GENERIC_HEADINGS = frozenset({"", "error", "oops", "oops!", "http error", "server error"})
REASON_PHRASES = frozenset(
    {s.phrase.lower() for s in HTTPStatus}
    | {  # the older and the servers' own spellings of the same phrases
        "request entity too large",
        "request-uri too long",
        "requested range not satisfiable",
        "unprocessable entity",
        "gateway time-out",
        "service temporarily unavailable",
        "moved temporarily",
    }
)
HTML_TYPES = ("text/html", "application/xhtml+xml")
XML_TYPES = ("application/xml", "text/xml", "+xml")
TEXT_SCAN_LINES = 5  # a plain-text body's lines looked at for one past a banner

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
# What may stand before a status in a banner: symbols and punctuation ("⚠️", "***", "#"),
# and the words "Error" or "HTTP".
_BANNER_LEAD = regex.compile(r"(?i)^[\p{S}\p{P}\p{Z}\p{M}\s]*(?:(?:error|http)\b[\s:#\-]*)?")
_BANNER_TAIL = regex.compile(r"[\p{S}\p{P}\p{Z}\p{M}\s]+$")
# The elements an XML error document says its message in, most specific first: `<Message>`
# (S3 and AWS's query APIs, most XML REST APIs), SOAP 1.1's `<faultstring>`, SOAP 1.2's
# `<Reason><Text>…</Text></Reason>` (and a plain `<reason>`); any namespace prefix, any case.
XML_MESSAGE_ELEMENTS = ("message", "faultstring", "reason")
_XML_ELEMENTS = tuple(
    regex.compile(
        rf"<(?:[\w.\-]{{1,64}}:)?(?i:{name})(?:\s[^<>]{{0,500}})?>(.{{1,2000}}?)"
        rf"</(?:[\w.\-]{{1,64}}:)?(?i:{name})\s*>",
        regex.DOTALL,
    )
    for name in XML_MESSAGE_ELEMENTS
)
_XML_CDATA = regex.compile(r"<!\[CDATA\[(.*?)\]\]>", regex.DOTALL)
_XML_TAG = regex.compile(r"<[^<>]{0,500}>")
_SENTENCE_END = (".", "!", "?", ":", ";", ",")


def says_only_status(text: str) -> bool:
    """True for a text that only repeats a status: "409 Conflict", "Error: 400 Bad Request",
    "⚠️ 503 — Service Unavailable", "Not Found", "HTTP 500". Such a text is no message."""
    rest = _BANNER_TAIL.sub("", _BANNER_LEAD.sub("", text.strip()[:200]))
    rest = _STATUS_PREFIX.sub("", rest).strip()
    rest = _BANNER_TAIL.sub("", _BANNER_LEAD.sub("", rest))
    return rest.lower() in REASON_PHRASES or rest.lower() in GENERIC_HEADINGS


def looks_like_html(content_type: str, text: str) -> bool:
    if any(t in content_type.lower() for t in HTML_TYPES):
        return True
    start = text[:64].lstrip().lower()
    return start.startswith(("<!doctype html", "<html"))


def looks_like_xml(content_type: str, text: str) -> bool:
    """An XML document that is not a web page: an `xml` type, or a body that starts as XML
    whatever its type says (S3's `<Error>` behind a proxy that calls it text)."""
    if looks_like_html(content_type, text):
        return False
    lowered = content_type.partition(";")[0].strip().lower()
    if any(lowered.endswith(t) for t in XML_TYPES):
        return True
    return text[:64].lstrip().startswith("<?xml")


def xml_message(text: str) -> str | None:
    """The words of an XML error document: its first `<Message>` (AWS S3 and the query
    protocols: `<Error><Code>NoSuchKey</Code><Message>The specified key does not
    exist.</Message>`), else a SOAP fault's `<faultstring>`, else its `<Reason>` (SOAP 1.2's
    holds a `<Text>`); one that only repeats a status is passed over for the next, as a JSON
    message path's is, and kept only when none says more."""
    head = text[:SCAN_CHARS]
    lowered = head.lower()
    phrase: str | None = None
    for name, element in zip(XML_MESSAGE_ELEMENTS, _XML_ELEMENTS, strict=True):
        found = element.search(head) if f"{name}>" in lowered else None
        if found is None:
            continue
        words = _xml_text(found.group(1))
        if words and not says_only_status(words):
            return words
        phrase = phrase or words or None
    return phrase


def _xml_text(inner: str) -> str:
    """An element's text: CDATA as written, nested elements' text joined, entities unescaped."""
    texts = []
    for start, piece in enumerate(_XML_CDATA.split(inner)):
        texts.append(piece if start % 2 else html.unescape(_XML_TAG.sub(" ", piece)))
    return _clean(" ".join(texts))


def looks_like_plain_text(content_type: str, text: str) -> bool:
    """A text body with no markup: `text/plain`, an `html` type holding no tag (Express's
    `res.send("…")`), no type at all, or `application/octet-stream` (nginx's default type, so
    its `return 503 "…"`) for something that is neither markup nor JSON and reads as text."""
    lowered = content_type.lower()
    head = text[:1024]
    if lowered.startswith("text/plain"):
        return not looks_like_html("", text)
    if any(t in lowered for t in HTML_TYPES):
        return "<" not in head
    untyped = not lowered or lowered.startswith("application/octet-stream")
    return untyped and head.lstrip()[:1] not in ("<", "{", "[") and _reads_as_text(head)


def _reads_as_text(head: str) -> bool:
    """No control characters but line breaks and tabs, and no undecodable bytes (U+FFFD)."""
    return not any((c < " " and c not in "\t\r\n") or c in "\x7f\ufffd" for c in head)


def text_message(text: str) -> str | None:
    """The first line of a plain-text error body (Go's `http.Error`, Express's `res.send`),
    or the next one when the first is a banner that only repeats the status; cut before any
    stack trace, paths masked; None when nothing is left."""
    lines = [line for line in text[:SCAN_CHARS].split("\n", TEXT_SCAN_LINES) if line.strip()]
    for line in lines[:TEXT_SCAN_LINES]:
        if not says_only_status(line):
            return _clean(line) or None
    return _clean(lines[0]) if lines else None


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
    detail = _detail(page)
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


def _detail(page: _PageText) -> str:
    """The first paragraph (with the block after it when it ends in a colon, as Bottle's
    "… caused an error:" before its `<pre>`), else the text standing right after the
    heading (HAProxy's pages have no paragraph)."""
    if not page.blocks:
        loose = _STATUS_PREFIX.sub("", _clean(page.loose))
        return "" if says_only_status(loose) else loose
    blocks = [_block(tag, text) for tag, text in page.blocks]
    index = next((i for i, b in enumerate(blocks) if b and not says_only_status(b)), None)
    if index is None:
        return ""
    detail = blocks[index]
    lead_in = page.blocks[index][1].rstrip().endswith(":")
    if lead_in and index + 1 < len(blocks) and blocks[index + 1]:
        detail = f"{detail}: {blocks[index + 1]}"
    return str(_STATUS_PREFIX.sub("", detail))


def _block(tag: str, text: str) -> str:
    """A `<pre>`'s first line (a traceback may follow), a paragraph's lines joined as
    sentences (its `<br>`s and nested paragraphs: Apache's "Reason: …")."""
    if tag == "pre":
        return _clean(text)
    lines = [_clean(line) for line in text.split("\n")]
    joined = ""
    for line in (line for line in lines if line):
        if joined:
            joined += " " if joined.endswith(_SENTENCE_END) else ". "
        joined += line
        if len(joined) > DETAIL_LIMIT:
            break
    return joined if len(joined) <= DETAIL_LIMIT else joined[: DETAIL_LIMIT - 1] + "…"


def _clean(text: str) -> str:
    # The first line only, bounded before any regex runs: a 16 KiB line of one token must
    # not cost the event loop more than a short one does.
    first = scrub(text.strip().split("\n", 1)[0][: DETAIL_LIMIT * 4]).strip()
    first = str(_SPACES.sub(" ", first)).strip(" :-")
    return first if len(first) <= DETAIL_LIMIT else first[: DETAIL_LIMIT - 1] + "…"


class _PageText(HTMLParser):
    """Collects the title, the first h1, the first two p or pre blocks, and the text that
    stands directly in the body (outside any element but the body)."""

    MAX_BLOCKS = 2

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.h1 = ""
        self.blocks: list[tuple[str, str]] = []
        self.loose = ""
        self._skip = 0
        self._open: str | None = None  # the element being collected
        self._buffer: list[str] = []
        self._depth: int | None = None  # elements open inside <body>; None before it

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self._depth = 0
            return
        if self._depth is not None and tag not in VOID:
            self._depth += 1
        if tag in SKIPPED:
            self._skip += 1
        elif self._open is not None and (tag in BREAKS or (tag == "p" and self._open == "p")):
            self._buffer.append("\n")
        elif self._open is None and self._wanted(tag):
            self._open, self._buffer = tag, []

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._open is not None and tag in BREAKS:
            self._buffer.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self._depth is not None and tag not in VOID and tag != "body":
            self._depth = max(0, self._depth - 1)
        if tag in SKIPPED:
            self._skip = max(0, self._skip - 1)
        elif tag == self._open:
            self._store(tag, "".join(self._buffer))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._open is not None:
            text = data if self._open == "pre" else data.replace("\n", " ")
            self._buffer.append(text)
        elif self._depth == 0 and not self.loose.strip() and data.strip():
            self.loose = data.strip()

    @property
    def complete(self) -> bool:
        """Everything a message needs has been seen: a detail (and the block after a detail
        that ends in a colon), and an h1 or a title."""
        if not self.blocks or not (self.h1 or self.title):
            return False
        first = self.blocks[0][1].rstrip()
        return len(self.blocks) == self.MAX_BLOCKS or not first.endswith(":")

    def close(self) -> None:
        super().close()
        if self._open is not None:  # a page cut at SCAN_CHARS: keep what was read
            self._store(self._open, "".join(self._buffer))

    def _wanted(self, tag: str) -> bool:
        if tag == "title":
            return not self.title
        if tag == "h1":
            return not self.h1
        return tag in ("p", "pre") and len(self.blocks) < self.MAX_BLOCKS

    def _store(self, tag: str, text: str) -> None:
        if not text.strip():
            return
        if tag == "title":
            self.title = text
        elif tag == "h1":
            self.h1 = text
        else:
            self.blocks.append((tag, text))


__all__ = [
    "html_message",
    "looks_like_html",
    "looks_like_plain_text",
    "looks_like_xml",
    "says_only_status",
    "scrub",
    "text_message",
    "xml_message",
]
