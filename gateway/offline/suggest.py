"""`mendpoint suggest`: the failures no rule of yours names, grouped, and the ways a rule could
match each group (docs/rules.md#drafts-from-traffic-capture-and-suggest).

The failures come from a capture directory (a route's `capture:`) or from a running
gateway's `/gaps`, whose every signature keeps one redacted sample: real requests and bodies
either way, never a body made up from a signature. They are grouped by the code the body
states (a JSON code field, or an XML `<code>`, `<errorCode>` or `<faultcode>`), else by the
signature `gaps` uses (route, status and the words with their variable
parts masked). Each group gets its candidate drafts, most specific first: on the stated code,
on the words at the JSON path that holds them, on the words in the raw body, on status and
path alone. Which candidate is offered is decided by trying them (gateway.offline.draft_check);
how a draft is written, by gateway.offline.draft_file.

Drafts are advice for a human: never retryable, never a `fix_command`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import regex

from gateway.classify.templates import message_at
from gateway.config.jsonpath import JsonPath, parse_json_path
from gateway.config.models import DEFAULT_MESSAGE_PATHS
from gateway.failure import Category
from gateway.feedback.signatures import VARIABLE_MASKS, GapSample, normalise
from gateway.offline.starter import (
    ExampleCode,
    category_for,
    stated_code,
    upper_snake,
    xml_stated_code,
)

MAX_SAMPLES = 3
"""Samples a draft keeps as its fixtures."""
# The variable parts `signatures.normalise` masks, as one pattern that captures them.
VARIABLE = regex.compile("|".join(pattern.pattern for pattern, _ in VARIABLE_MASKS))
MASKED = tuple({mask for _, mask in VARIABLE_MASKS})
DEFAULT_PATHS = tuple(parse_json_path(path) for path in DEFAULT_MESSAGE_PATHS)
# A key whose name says it holds words (`errorMessage`, `error_msg`, `reason`), plain enough
# to be a path of its own.
WORDS_KEY = regex.compile(r"(?i)^[a-z_][a-z0-9_]*(?:message|msg|detail|description|reason)$")


ID_SEGMENT = regex.compile(
    r"\d+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}|[\w.+-]+@[\w-]+\.[\w.-]+"
)


@dataclass
class Sample:
    route: str
    method: str
    path: str
    status: int
    content_type: str
    body: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    """The other response headers kept (Retry-After, WWW-Authenticate), redacted."""
    count: int = 1
    """The failures this sample stands for: a /gaps signature's count, 1 for a capture."""


@dataclass
class Draft:
    id: str
    route: str
    status: int
    category: Category
    code: str
    code_source: str
    path: str
    methods: list[str]
    json_path: str | None
    pattern: str | None
    samples: list[Sample] = field(default_factory=list)
    count: int = 0
    notes: list[str] = field(default_factory=list)
    how: str = "status and path"
    """What the draft matches on, for the reader: "the body's errorCode", "the words at
    message", "the words in the body", or "status and path"."""
    checked: list[Sample] = field(default_factory=list)
    """Every sample of its group (up to a bound): what the draft must win."""


@dataclass
class Group:
    """Failures of one route and status with one stated code, or one signature."""

    route: str
    status: int
    signature: str
    samples: list[Sample]
    stated: ExampleCode | None

    @property
    def count(self) -> int:
        return sum(s.count for s in self.samples)

    def describe(self) -> str:
        return f"{self.route} {self.status} {self.signature!r} ({self.count} failures)"


def samples_from_captures(captures: list[dict[str, Any]]) -> tuple[list[Sample], list[str]]:
    """The unmatched HTTP failures among the captures, and why any others were left out."""
    found, notes = [], []
    for capture in captures:
        response = capture.get("response", {})
        classified = capture.get("classified", {})
        if not classified.get("default_rule"):
            continue  # a rule of yours already names it
        status = response.get("status")
        if not isinstance(status, int):
            notes.append(f"transport failure {response.get('transport')}: no body to draft from")
            continue
        headers = {str(k): str(v) for k, v in response.get("headers", {}).items()}
        found.append(
            _sample(
                str(capture.get("route", "")),
                str(capture.get("request", {}).get("method", "GET")),
                str(capture.get("request", {}).get("path", "/")),
                status,
                headers,
                str(response.get("body", "")),
                str(classified.get("message", "")),
            )
        )
    return found, notes


def sample_from_gap(route: str, count: int, gap: GapSample) -> Sample | None:
    """A /gaps signature's sample, standing for its `count` failures (None for a transport
    fault: no body to draft from)."""
    if gap.status is None:
        return None
    sample = _sample(
        route, gap.method, gap.path, gap.status, dict(gap.headers), gap.body, gap.message
    )
    sample.count = count
    return sample


def _sample(
    route: str,
    method: str,
    path: str,
    status: int,
    headers: dict[str, str],
    body: str,
    message: str,
) -> Sample:
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    others = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    return Sample(route, method, path, status, content_type, body, message, others)


def message_paths(configured: Sequence[str] = ()) -> tuple[JsonPath, ...]:
    """The paths the running config reads words at (`extra_message_paths` first), or the
    defaults."""
    return tuple(parse_json_path(p) for p in configured) or DEFAULT_PATHS


def groups_of(samples: list[Sample], paths: tuple[JsonPath, ...] = DEFAULT_PATHS) -> list[Group]:
    """A code the upstream states names a group better than its words do: two registry tags
    that are both MANIFEST_UNKNOWN are one failure. Otherwise the `gaps` signature of the
    words (`words`)."""
    grouped: dict[tuple[str, int, str], list[Sample]] = defaultdict(list)
    stated: dict[tuple[str, int, str], ExampleCode] = {}
    for sample in samples:
        code = stated_code(json_of(sample.body)) or xml_stated_code(
            sample.content_type, sample.body
        )
        signature = (
            f"code {code.json_path or code.element} {code.value}"
            if code
            else normalise(words(sample, paths)[1])
        )
        key = (sample.route, sample.status, signature)
        grouped[key].append(sample)
        if code is not None:
            stated[key] = code
    return [
        Group(route, status, signature, group, stated.get((route, status, signature)))
        for (route, status, signature), group in sorted(grouped.items())
    ]


def words(sample: Sample, paths: tuple[JsonPath, ...]) -> tuple[str | None, str]:
    """Where a sample's words are and what they say: at the first message path that holds
    them whole, else under a key whose name says it holds words but no path reads
    (`unread_words`), else the message the fallback gave (an HTML heading, an XML
    `<Message>`, a text body's first line, or the status phrase)."""
    body = json_of(sample.body)
    for path in paths:
        found = _whole_message(path, body)
        if found is not None:
            return path.text, found
    unread = unread_words(body)
    if unread is not None:
        return unread
    return None, sample.message


def unread_words(body: Any) -> tuple[str, str] | None:
    """The key and words of a JSON object's member that holds words under a name no
    default path reads (`{"errCode": 7, "errMsg": "…"}`): what `extra_message_paths`
    would read."""
    if not isinstance(body, dict):
        return None
    for key, value in body.items():
        if isinstance(value, str) and value.strip() and WORDS_KEY.match(key):
            return key, value.strip()
    return None


def candidates(group: Group, paths: tuple[JsonPath, ...], taken: set[str]) -> list[Draft]:
    """The ways a rule could match `group`, most specific first, all under one id and code."""
    route, status, samples = group.route, group.status, group.samples
    code_source = "the message's stable words"
    if group.stated is not None and group.stated.element is not None:
        code, code_source = group.stated.code, f"the body's {group.stated.element} element"
    elif group.stated is not None:
        code, code_source = group.stated.code, f"the body's {group.stated.json_path} field"
    else:
        code = _code(words(samples[0], paths)[1], status)
    code = _unique(code, taken)
    base = Draft(
        id=f"draft-{route}-{status}-{code.lower().replace('_', '-')}"[:120],
        route=route,
        status=status,
        category=category_for(status),
        code=code,
        code_source=code_source,
        path=common_glob([s.path for s in samples]),
        methods=sorted({s.method for s in samples}),
        json_path=None,
        pattern=None,
        samples=samples[:MAX_SAMPLES],
        count=group.count,
        checked=samples[:50],
    )
    found: list[Draft] = []
    if group.stated is not None and group.stated.element is not None:
        how = f"the body's {group.stated.element}"
        found.append(replace(base, pattern=_escape(group.stated.element), how=how))
    elif group.stated is not None:
        value = "^" + _escape(group.stated.value) + "$"
        how = f"the body's {group.stated.json_path}"
        found.append(replace(base, json_path=group.stated.json_path, pattern=value, how=how))
    note = "matched on status and path only: no words common to every sample could be matched"
    try:
        at = _message_path(samples, paths)
        if at is not None:
            pattern = _pattern([words(s, paths)[1] for s in samples], anchored=True)
            if pattern is not None:
                how = f"the words at {at}"
                found.append(replace(base, json_path=at, pattern=pattern, how=how))
        for text in _pieces(words(samples[0], paths)[1]):
            pattern = _pattern([text], anchored=False, bodies=[s.body for s in samples])
            if pattern is not None:
                found.append(replace(base, pattern=pattern, how="the words in the body"))
                break
    except TimeoutError:  # a pattern too slow to check is one nobody should run on traffic
        note = (
            "matched on status and path only: the words' pattern took too long to check "
            "against a sample (write a narrower one by hand)"
        )
    found.append(replace(base, notes=[note]))
    return found


def _message_path(samples: list[Sample], paths: tuple[JsonPath, ...]) -> str | None:
    """The JSON path that holds the words in every sample's body, if one does."""
    where = {words(s, paths)[0] for s in samples}
    return where.pop() if len(where) == 1 else None


def _whole_message(path: JsonPath, body: Any) -> str | None:
    """The message the classifier reads at `path` (`message_at`), when one value holds it
    whole: a `json:` condition tests values one by one, so words a wildcard joined from two
    values ("a; b") are matched on the body instead."""
    message = message_at(path, body)
    if message is None or path.literal:
        return message
    return (
        message
        if any(v.strip() == message for v, _ in path.find(body) if isinstance(v, str))
        else None
    )


def _pieces(text: str) -> list[str]:
    """The words, then their parts (an HTML page's heading and paragraph are two), longest
    first: a body regex needs text the raw body holds as it is."""
    parts = [p.strip() for p in regex.split(r": |\n|\. ", text) if len(p.strip()) >= 8]
    return [text, *sorted(set(parts) - {text}, key=len, reverse=True)] if text.strip() else []


def _pattern(texts: list[str], *, anchored: bool, bodies: list[str] | None = None) -> str | None:
    """A regex over the first text, its variable parts captures, that every text (or every
    body, searched) matches."""
    first = texts[0]
    if not first.strip():
        return None
    pieces, last = [], 0
    for n, match in enumerate(VARIABLE.finditer(first), start=1):
        pieces.append(_escape(first[last : match.start()]))
        pieces.append(f"(?P<v{n}>.+?)")
        last = match.end()
    pieces.append(_escape(first[last:]))
    pattern = "^" + "".join(pieces) + "$" if anchored else "".join(pieces)
    try:
        compiled = regex.compile(pattern)
    except regex.error:
        return None
    for target in texts if bodies is None else bodies:  # TimeoutError: see `candidates`
        if not compiled.search(target, timeout=0.1):
            return None
    return pattern


def _code(text: str, status: int) -> str:
    stable = normalise(text)
    for mask in MASKED:
        stable = stable.replace(mask, " ")
    return upper_snake(stable) or f"HTTP_{status}"


def _unique(code: str, taken: set[str]) -> str:
    unique, n = code, 2
    while unique in taken:
        unique, n = f"{code}_{n}", n + 1
    taken.add(unique)
    return unique


def _escape(text: str) -> str:
    """Literal text in a pattern a human will read: spaces stay spaces."""
    escaped: str = regex.escape(text, special_only=True, literal_spaces=True)
    return escaped


def common_glob(paths: list[str]) -> str:
    """The narrowest glob matching every path: differing segments become `*`, and so does a
    segment that is an id (a number, a UUID, a long hex string, an email: one sample of
    `/accounts/42` stands for `/accounts/*`), differing lengths `**`. A trailing slash is
    part of the path (`/v2/` is not `/v2`: the OCI registry's base endpoint is `/v2/`), so it
    is kept when every path has it."""
    bare = [p.split("?")[0] for p in paths]
    split = [p.strip("/").split("/") for p in bare]
    if len({len(s) for s in split}) > 1:
        prefix = []
        for parts in zip(*split, strict=False):
            if len(set(parts)) != 1:
                break
            prefix.append(parts[0])
        return "/" + "/".join([*prefix, "**"]) if prefix else "/**"
    segments = [
        parts[0] if len(set(parts)) == 1 and not ID_SEGMENT.fullmatch(parts[0]) else "*"
        for parts in zip(*split, strict=True)
    ]
    glob = "/" + "/".join(segments)
    if glob != "/" and all(p.endswith("/") for p in bare):
        glob += "/"
    return glob


def json_of(body: str) -> Any:
    """A sample's body as JSON, or None."""
    try:
        return json.loads(body)
    except ValueError:
        return None
