"""`mendpoint suggest`: draft rules from the failures no rule of yours names (docs/rules.md).

The failures come from a capture directory (a route's `capture:`) or from a running
gateway's `/gaps`. They are grouped by the signature `gaps` uses (route, status and the
message with its variable parts masked); each group becomes a draft rule that matches its
status, a path glob common to its samples and the stable part of its message (the variable
parts become named captures), checked against every sample, plus fixtures made from the
samples, so `mendpoint test` passes on the drafts as written.

Drafts are advice for a human: never retryable, never a `fix_command`, and a `review:`
comment on every guess. A group whose shipped rule says retryable is left to it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import regex

from gateway.classify.templates import message_at
from gateway.config.jsonpath import JsonPath, parse_json_path
from gateway.config.models import DEFAULT_MESSAGE_PATHS
from gateway.failure import Category
from gateway.feedback.signatures import VARIABLE_MASKS, normalise
from gateway.offline.starter import (
    FIX_REQUIRED,
    TRANSIENT,
    ExampleCode,
    category_for,
    stated_code,
    upper_snake,
)
from gateway.offline.yaml_writer import Comment, Mapping, Noted, Sequence, block, emit

MAX_SAMPLES = 3
# The variable parts `signatures.normalise` masks, as one pattern that captures them.
VARIABLE = regex.compile("|".join(pattern.pattern for pattern, _ in VARIABLE_MASKS))
MASKED = tuple({mask for _, mask in VARIABLE_MASKS})
MESSAGE_PATHS = tuple(parse_json_path(path) for path in DEFAULT_MESSAGE_PATHS)


@dataclass
class Sample:
    route: str
    method: str
    path: str
    status: int
    content_type: str
    body: str
    message: str


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
        headers = {k.lower(): v for k, v in response.get("headers", {}).items()}
        found.append(
            Sample(
                route=str(capture.get("route", "")),
                method=str(capture.get("request", {}).get("method", "GET")),
                path=str(capture.get("request", {}).get("path", "/")),
                status=status,
                content_type=str(headers.get("content-type", "")),
                body=str(response.get("body", "")),
                message=str(classified.get("message", "")),
            )
        )
    return found, notes


def sample_from_signature(route: str, status: int, signature: str) -> Sample:
    """A /gaps signature as a sample: its masked message is all there is (no body or path)."""
    return Sample(route, "GET", "/", status, "", signature, signature)


def drafts_from(samples: list[Sample]) -> tuple[list[Draft], list[str]]:
    # A code the upstream states names a group better than its words do: two registry tags
    # that are both MANIFEST_UNKNOWN are one failure. Otherwise the `gaps` signature.
    groups: dict[tuple[str, int, str], list[Sample]] = defaultdict(list)
    stated: dict[tuple[str, int, str], ExampleCode] = {}
    for sample in samples:
        code = stated_code(_json(sample.body))
        signature = f"code {code.json_path} {code.value}" if code else normalise(sample.message)
        key = (sample.route, sample.status, signature)
        groups[key].append(sample)
        if code is not None:
            stated[key] = code
    drafts: list[Draft] = []
    notes: list[str] = []
    codes: set[str] = set()
    for (route, status, signature), group in sorted(groups.items()):
        category = category_for(status)
        if category in TRANSIENT:
            notes.append(
                f"{route} {status} {signature!r} ({len(group)} failures): left to the shipped "
                "rule, which calls it retryable; a draft never does"
            )
            continue
        code = stated.get((route, status, signature))
        try:
            drafts.append(_draft(route, status, category, signature, group, codes, code))
        except TimeoutError:
            notes.append(
                f"{route} {status} {signature!r} ({len(group)} failures): no draft; its "
                "pattern took too long to check against a sample (write this one by hand)"
            )
    return drafts, notes


def _draft(
    route: str,
    status: int,
    category: Category,
    signature: str,
    group: list[Sample],
    codes: set[str],
    stated: ExampleCode | None,
) -> Draft:
    notes: list[str] = []
    json_path: str | None
    pattern: str | None
    if stated is not None:
        # Matched on the upstream's own code, whatever the words say.
        code = _unique(stated.code, codes)
        code_source = f"the body's {stated.json_path} field"
        json_path, pattern = stated.json_path, "^" + _escape(stated.value) + "$"
    else:
        code = _unique(_code(signature, status), codes)
        code_source = "the message's stable words"
        json_path = _message_path(group)
        pattern = _pattern(group, json_path)
    if pattern is None:
        notes.append("no message common to every sample: matched on status and path only")
    draft = Draft(
        id=f"draft-{route}-{status}-{code.lower().replace('_', '-')}"[:120],
        route=route,
        status=status,
        category=category,
        code=code,
        code_source=code_source,
        path=common_glob([s.path for s in group]),
        methods=sorted({s.method for s in group}),
        json_path=json_path if pattern is not None else None,
        pattern=pattern,
        samples=group[:MAX_SAMPLES],
        count=len(group),
        notes=notes,
    )
    return draft


def _code(signature: str, status: int) -> str:
    stable = signature
    for mask in MASKED:
        stable = stable.replace(mask, " ")
    return upper_snake(stable)[:48].rstrip("_") or f"HTTP_{status}"


def _unique(code: str, taken: set[str]) -> str:
    unique, n = code, 2
    while unique in taken:
        unique, n = f"{code}_{n}", n + 1
    taken.add(unique)
    return unique


def _message_path(group: list[Sample]) -> str | None:
    """The JSON path that holds the message in every sample's body, if there is one."""
    for path in MESSAGE_PATHS:
        if all(_whole_message(path, _json(s.body)) == s.message for s in group):
            return path.text
    return None


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


def _pattern(group: list[Sample], json_path: str | None) -> str | None:
    """A regex over the message (or the raw body) that every sample matches."""
    first = group[0].message
    if not first.strip():
        return None
    pieces, last = [], 0
    for n, match in enumerate(VARIABLE.finditer(first), start=1):
        pieces.append(_escape(first[last : match.start()]))
        pieces.append(f"(?P<v{n}>.+?)")
        last = match.end()
    pieces.append(_escape(first[last:]))
    pattern = "^" + "".join(pieces) + "$" if json_path else "".join(pieces)
    try:
        compiled = regex.compile(pattern)
    except regex.error:
        return None
    for sample in group:
        target = sample.message if json_path else sample.body
        if not compiled.search(target, timeout=0.1):
            return None
    return pattern


def _escape(text: str) -> str:
    """Literal text in a pattern a human will read: spaces stay spaces."""
    escaped: str = regex.escape(text, special_only=True, literal_spaces=True)
    return escaped


def common_glob(paths: list[str]) -> str:
    """The narrowest glob matching every path: differing segments become `*`, differing
    lengths `**`. A trailing slash is part of the path (`/v2/` is not `/v2`: the OCI
    registry's base endpoint is `/v2/`), so it is kept when every path has it."""
    bare = [p.split("?")[0] for p in paths]
    split = [p.strip("/").split("/") for p in bare]
    if len({len(s) for s in split}) > 1:
        prefix = []
        for parts in zip(*split, strict=False):
            if len(set(parts)) != 1:
                break
            prefix.append(parts[0])
        return "/" + "/".join([*prefix, "**"]) if prefix else "/**"
    segments = [parts[0] if len(set(parts)) == 1 else "*" for parts in zip(*split, strict=True)]
    glob = "/" + "/".join(segments)
    if glob != "/" and all(p.endswith("/") for p in bare):
        glob += "/"
    return glob


def _json(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def render_rules(drafts: list[Draft], notes: list[str], source: str) -> str:
    """The drafts as a rule file, through `yaml_writer`: paths, messages and route names come
    from traffic or a fleet store, and none of them may add to the file (docs/security.md)."""
    header = (
        f"Draft rules written by `mendpoint suggest --from {source}`.",
        "Each one names a group of failures that only a shipped fallback classified. Review",
        "every `review:` line, then include this file in your config (`include: [THIS_FILE]`)",
        "and run `mendpoint test` on the fixtures beside it before you roll out.",
        *(f"not a draft: {note}" for note in notes),
    )
    rules = Sequence()
    for draft in drafts:
        example = draft.samples[0]
        rules.items += [
            Comment(
                f"{draft.count} failure(s), e.g. {example.method} {example.path} → "
                f"{draft.status} {json.dumps(example.message[:120], ensure_ascii=False)}"
            ),
            *(Comment(f"review: {note}") for note in draft.notes),
            Mapping().add("id", draft.id).add("match", _match(draft)).add("error", _error(draft)),
        ]
    return emit(Mapping().add("rules", rules), header)


def _match(draft: Draft) -> Mapping:
    match = (
        Mapping()
        .add("routes", [draft.route])
        .add("status", [draft.status])
        .add("path", Noted(draft.path, "review: the samples' common path"))
    )
    if draft.pattern is not None and draft.json_path is not None:
        match.add("json", {"path": draft.json_path, "regex": draft.pattern})
    elif draft.pattern is not None:
        match.add("body", draft.pattern)
    return match


def _error(draft: Draft) -> Mapping:
    error = (
        Mapping()
        .add("code", Noted(draft.code, f"review: from {draft.code_source}"))
        .add("category", draft.category.value)
    )
    if draft.category in FIX_REQUIRED:
        error.note("review: caller-correctable; say what must change, as precisely as you can")
        error.add("fix_required", FIX_REQUIRED[draft.category])
    else:
        error.note("review: terminal (neither retryable nor fixable by the caller)")
    return error


def render_fixtures(drafts: list[Draft], rules_file: str) -> str:
    """The drafts' fixture file, through `yaml_writer` as the rules are."""
    header = (f"Fixtures for {rules_file}, made from the captured samples by `mendpoint suggest`.",)
    return emit(Mapping().add("cases", block(fixture_cases(drafts))), header)


def fixture_cases(drafts: list[Draft]) -> list[dict[str, Any]]:
    cases = []
    for draft in drafts:
        for index, sample in enumerate(draft.samples):
            response: dict[str, Any] = {"status": sample.status, "body": sample.body}
            if sample.content_type:
                response["content_type"] = sample.content_type
            cases.append(
                {
                    "name": f"{draft.id}-sample-{index + 1}",
                    "request": {"method": sample.method, "path": sample.path},
                    "response": response,
                    "expect": {"rule": draft.id, "code": draft.code},
                }
            )
    return cases
