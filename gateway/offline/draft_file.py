"""The files `mendpoint suggest` writes (and the console shows): the draft rules, and their
fixtures made of the drafts' own real samples. Both through `yaml_writer`: paths, messages
and route names come from traffic or a fleet store, and none of them may add to the file
(docs/security.md#drafted-yaml).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.offline.starter import FIX_REQUIRED
from gateway.offline.suggest import Draft
from gateway.offline.yaml_writer import Comment, Mapping, Noted, Sequence, block, emit


def render_rules(
    drafts: list[Draft], notes: list[str], source: str, proposals: list[str] | tuple[str, ...] = ()
) -> str:
    """The drafts as a rule file, in the order they were tried (the order they match in)."""
    header = (
        f"Draft rules written by `mendpoint suggest --from {source}`.",
        "Each one names a group of failures that only a shipped fallback classified, and was",
        "tried with `explain` on its own samples, with the running config and the drafts before",
        "it: each wins them. Review every `review:` line, then include this file in your config",
        "(`include: [THIS_FILE]`) and run `mendpoint test` on the fixtures beside it.",
        *(f"propose: {proposal}" for proposal in proposals),
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
            Comment(f"matched on {draft.how}"),
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
    header = (
        f"Fixtures for {rules_file}, written by `mendpoint suggest` from the drafts' own",
        "samples: real failures, redacted as they were captured.",
    )
    return emit(Mapping().add("cases", block(fixture_cases(drafts))), header)


def fixture_cases(drafts: list[Draft]) -> list[dict[str, Any]]:
    cases = []
    for draft in drafts:
        for index, sample in enumerate(draft.samples):
            response: dict[str, Any] = {"status": sample.status, "body": sample.body}
            if sample.content_type:
                response["content_type"] = sample.content_type
            if sample.headers:
                response["headers"] = dict(sample.headers)
            cases.append(
                {
                    "name": f"{draft.id}-sample-{index + 1}",
                    "request": {"method": sample.method, "path": sample.path},
                    "response": response,
                    "expect": {"rule": draft.id, "code": draft.code},
                }
            )
    return cases
