"""The message of an HTML, plain-text or XML error page: its heading and first paragraph (or
its first line, or its `<Message>`, `<faultstring>` or `<Reason>`), never its source.

Flask, Django and Express answer errors with HTML by default. The page's `<h1>` (else its
`<h2>`, else `<title>`) says what failed and its first `<p>` or `<pre>` says why, or the text
standing right after the heading when that comes first (HTML 2.0 pages: Yaws, mochiweb,
webmachine). A page that labels its parts (Tomcat's ErrorReportValve: `<p><b>Message</b> …`;
Jetty's ErrorHandler: `<tr><th>MESSAGE:</th><td>…`) gives the part labelled `Message` as the
why, whatever stands before it. Scripts, styles and everything after the first stack frame
are dropped, and file paths are masked, so a debug page's traceback never becomes an agent's
`message`. Parsing uses the standard library's
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
LABELS = frozenset({"b", "strong", "th", "dt"})
"""Elements a page names its parts with: `<b>Message</b> …` (Tomcat), `<th>MESSAGE:</th>`
(Jetty), `<dt>Message</dt><dd>…`."""
PART_LABELS = ("message", "error message", "reason", "description")
"""The labels of the parts that hold the message, the first found winning (case, a colon and
spaces aside): Tomcat's `Description` is the status's own gloss, read only when the page has
no `Message` (a status report with no message of the servlet's)."""
LABELLED_ENDS = frozenset({"p", "tr", "dd", "div", "li"})
"""Where a labelled part ends."""
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
# The elements an XML error document states its code in: `<code>` (S3's `<Code>`, most XML
# REST APIs), `<errorCode>`, SOAP 1.1's `<faultcode>` (its `soap:` prefix dropped from the
# value); a value with markup inside (SOAP 1.2's `<Code><Value>`) is not one.
XML_CODE_ELEMENTS = ("code", "errorcode", "faultcode")
_XML_CODES = tuple(
    regex.compile(
        rf"<(?:[\w.\-]{{1,64}}:)?(?i:{name})(?:\s[^<>]{{0,500}})?>\s*([^<>]{{1,200}}?)\s*"
        rf"</(?:[\w.\-]{{1,64}}:)?(?i:{name})\s*>"
    )
    for name in XML_CODE_ELEMENTS
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


def xml_code(text: str) -> tuple[str, str] | None:
    """The code an XML error document states, and the element as the body holds it (for a
    `body:` regex): `<error><code>AUDIT_FORBIDDEN</code>…` gives ("AUDIT_FORBIDDEN",
    "<code>AUDIT_FORBIDDEN</code>"). A faultcode's namespace prefix is dropped from the code
    (`soap:Server` → "Server")."""
    head = text[:SCAN_CHARS]
    lowered = head.lower()
    for name, element in zip(XML_CODE_ELEMENTS, _XML_CODES, strict=True):
        found = element.search(head) if f"{name}>" in lowered else None
        if found is not None:
            return html.unescape(found.group(1)).rpartition(":")[2], found.group(0)
    return None


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
    heading = _heading(page.h1) or _heading(page.h2) or _heading(page.title)
    detail = _labelled(page) or _detail(page)
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


def _labelled(page: _PageText) -> str:
    """The part a page labels as its message (`<b>Message</b> The requested resource […] is
    not available`), or "" when it labels none or that part says only a status."""
    for label in PART_LABELS:
        value = _clean(page.parts.get(label, ""))
        if value and not says_only_status(value):
            return value
    return ""


def _detail(page: _PageText) -> str:
    """The first paragraph (with the block after it when it ends in a colon, as Bottle's
    "… caused an error:" before its `<pre>`), else the text standing right after the
    heading (HAProxy's pages have no paragraph; an HTML 2.0 page's sentence comes before
    its first `<P>`, which then holds only the `<ADDRESS>` line)."""
    if page.loose_first:
        loose = _STATUS_PREFIX.sub("", _clean(page.loose))
        if loose and not says_only_status(loose):
            return str(loose)
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
    """Collects the title, the first h1 and h2, the first two p or pre blocks, the text that
    stands directly in the body (outside any element but the body), and the part labelled
    as the message."""

    MAX_BLOCKS = 2

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.h1 = ""
        self.h2 = ""
        self.blocks: list[tuple[str, str]] = []
        self.loose = ""
        self.loose_first = False
        """The loose text came before any block (a sentence after the heading, then `<P>`)."""
        self.parts: dict[str, str] = {}
        """The labelled parts (`PART_LABELS`) seen, by label."""
        self._label: list[str] | None = None  # the text of a label element being read
        self._part: str | None = None  # the label whose value is being read
        self._value: list[str] | None = None  # the text after that label
        self._skip = 0
        self._open: str | None = None  # the element being collected
        self._buffer: list[str] = []
        self._depth: int | None = None  # elements open inside <body>; None before it

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self._depth = 0
            return
        if tag in LABELS and self._value is None:
            self._label = []
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
        if tag in LABELS and self._label is not None:
            label = " ".join("".join(self._label).split()).rstrip(":").strip().lower()
            self._label = None
            wanted = label in PART_LABELS and label not in self.parts
            self._part, self._value = (label, []) if wanted else (None, None)
        elif tag in LABELLED_ENDS and self._value is not None:
            self._end_part()
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
        if self._label is not None:
            self._label.append(data)
        elif self._value is not None:
            self._value.append(data.replace("\n", " "))
        if self._open is not None:
            text = data if self._open == "pre" else data.replace("\n", " ")
            self._buffer.append(text)
        elif self._depth == 0 and not self.loose.strip() and data.strip():
            self.loose = data.strip()
            self.loose_first = not self.blocks and bool(self.h1 or self.h2)

    @property
    def complete(self) -> bool:
        """Everything a message needs has been seen: a detail (and the block after a detail
        that ends in a colon), and an h1 or a title."""
        if not self.blocks or not (self.h1 or self.title) or self._value is not None:
            return False
        first = self.blocks[0][1].rstrip()
        return len(self.blocks) == self.MAX_BLOCKS or not first.endswith(":")

    def close(self) -> None:
        super().close()
        if self._open is not None:  # a page cut at SCAN_CHARS: keep what was read
            self._store(self._open, "".join(self._buffer))
        if self._value is not None:
            self._end_part()

    def _end_part(self) -> None:
        if self._part is not None and self._value is not None:
            self.parts[self._part] = "".join(self._value)
        self._part = self._value = None

    def _wanted(self, tag: str) -> bool:
        if tag == "title":
            return not self.title
        if tag == "h1":
            return not self.h1
        if tag == "h2":
            return not self.h2 and not self.h1
        return tag in ("p", "pre") and len(self.blocks) < self.MAX_BLOCKS

    def _store(self, tag: str, text: str) -> None:
        if not text.strip():
            return
        if tag == "title":
            self.title = text
        elif tag == "h1":
            self.h1 = text
        elif tag == "h2":
            self.h2 = text
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
    "xml_code",
    "xml_message",
]
