"""Drafts tried before they are shown: `mendpoint suggest` and the console's Gaps page offer
a draft only when `explain`, run with the running config plus the drafts file, picks the
draft for every one of its samples (docs/rules.md#drafts-from-traffic-capture-and-suggest).

A group the running config already answers is not drafted: a rule of the operator's that
names it now, or a shipped fallback that calls it retryable (a 429, a 503; gateway.offline.
coverage). For the others, the candidates of gateway.offline.suggest are tried in order, in
a file that holds every draft accepted before: the specific ones (a stated code, the words
at their path, the words in the body) for every group first, then status and path alone for
the groups none of those won, so a broad draft never sits in front of a narrow one. Last,
the whole file is tried again, and a draft that loses a sample to another is dropped, with
the reason. A group none of its candidates can win is not offered: the notes say which rule
`explain` picked instead.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from multidict import CIMultiDict

from gateway.config.errors import ConfigError
from gateway.config.jsonpath import JsonPath
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.config.yamlsrc import YamlDoc
from gateway.enrich.step import Enricher
from gateway.offline.coverage import covering_rule
from gateway.offline.draft_file import render_rules
from gateway.offline.explain import Sample as ExplainSample
from gateway.offline.explain import SampleError, explain
from gateway.offline.suggest import (
    Draft,
    Group,
    Sample,
    candidates,
    groups_of,
    json_of,
    message_paths,
    unread_words,
    words,
)

DRAFTS_FILE = "suggested-drafts.yaml"
"""The name the drafts file has while it is tried, in a directory of its own."""
MESSAGE_PATHS_DOC = "docs/rules.md#message_paths-and-extra_message_paths-config"


@dataclass
class Drafted:
    """What `suggest` offers: drafts that win their samples, why any group has none, and
    config keys worth adding."""

    drafts: list[Draft] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    proposals: list[str] = field(default_factory=list)
    by_sample: dict[int, Draft | str] = field(default_factory=dict)
    """For each sample given (by `id`), the draft offered for its group, or why none is."""

    def settle(self, group: Group, outcome: Draft | str) -> None:
        for sample in group.samples:
            self.by_sample[id(sample)] = outcome


def explained(sample: Sample) -> ExplainSample:
    """A suggest sample as `explain` (and a fixture) takes it."""
    headers: CIMultiDict[str] = CIMultiDict(sample.headers)
    if sample.content_type:
        headers["Content-Type"] = sample.content_type
    return ExplainSample(
        method=sample.method,
        path=sample.path,
        status=sample.status,
        headers=headers,
        body=sample.body.encode(),
    )


async def draft_rules(samples: list[Sample], loaded: LoadedConfig) -> Drafted:
    """The drafts for `samples` under the running config `loaded`, each tried first."""
    with tempfile.TemporaryDirectory(prefix="mendpoint-drafts-") as directory:
        return await _draft_rules(samples, Trial(loaded, os.path.join(directory, DRAFTS_FILE)))


@dataclass(frozen=True, slots=True)
class Trial:
    """The running config, and where a drafts file is written to be tried with it."""

    loaded: LoadedConfig
    path: str

    def with_drafts(self, text: str) -> LoadedConfig:
        """The running config as it loads with the drafts file `text` last in its
        `include:`, as an operator includes it (the config loader's own order and checks)."""
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write(text)
        doc = self.loaded.docs[self.loaded.source]
        data = dict(doc.data)
        data["include"] = [*data.get("include", []), self.path]
        return load_config(self.loaded.source, YamlDoc(doc.file, data, doc.lines))


async def _draft_rules(samples: list[Sample], trial: Trial) -> Drafted:
    loaded = trial.loaded
    config = loaded.config
    paths = message_paths([*config.extra_message_paths, *config.message_paths])
    done = Drafted(proposals=proposals(samples, paths))
    enricher = Enricher.offline(loaded)
    ids = {rule.spec.id for rule in loaded.rules}
    codes: set[str] = set()
    tried: list[tuple[Group, list[Draft]]] = []
    routes = {route.name for route in config.routes}
    for group in groups_of(samples, paths):
        if group.route not in routes:
            note = f"no route of the running config is named {group.route!r}"
            done.notes.append(f"{group.describe()}: {note}")
            done.settle(group, note)
            continue
        covered = await covering_rule(loaded, explained(group.samples[0]), enricher)
        if covered is not None:
            done.notes.append(f"{group.describe()}: covered by rule {covered}")
            done.settle(group, f"covered by rule {covered}: not drafted")
            continue
        tried.append((group, _unique_ids(candidates(group, paths, codes), ids)))
    accepted: list[Draft] = []
    lost: dict[int, str] = {}
    for index, (_, choices) in enumerate(tried):  # the specific ways, every group first
        for draft in choices[:-1]:
            why = await losing(trial, [*accepted, draft], draft)
            if why is None:
                accepted.append(draft)
                break
            lost[index] = f"on {draft.how}: {why}"
        else:
            lost.setdefault(index, "")
    for index, (group, choices) in enumerate(tried):  # then status and path alone
        if index not in lost:
            continue
        broad = choices[-1]
        why = await losing(trial, [*accepted, broad], broad)
        if why is None:
            accepted.append(broad)
        else:
            reasons = "; ".join(r for r in (lost[index], f"on status and path: {why}") if r)
            note = f"no draft wins its own samples ({reasons})"
            done.notes.append(f"{group.describe()}: {note}")
            done.settle(group, note)
    done.drafts = await _settled(trial, accepted, done.notes)
    for group, choices in tried:
        offered = next((d for d in done.drafts if d.id == choices[0].id), None)
        if offered is not None:
            done.settle(group, offered)
        elif id(group.samples[0]) not in done.by_sample:
            done.settle(group, "dropped: another draft wins its samples")
    return done


async def losing(trial: Trial, drafts: list[Draft], draft: Draft) -> str | None:
    """Why `draft`, in a drafts file of `drafts` included last, does not win every sample of
    its group under the running config; None when `explain` picks it for each."""
    try:
        loaded = trial.with_drafts(render_rules(drafts, [], "a trial"))
    except ConfigError as exc:
        return f"the drafts file does not load: {exc}"
    enricher = Enricher.offline(loaded)
    for sample in draft.checked:
        try:
            result = await explain(loaded, explained(sample), enricher=enricher)
        except SampleError as exc:
            return str(exc)
        picked = result.verdict.rule.id if result.verdict is not None else None
        if picked != draft.id:
            return (
                f"for {sample.method} {sample.path} → {sample.status} explain picks "
                f"{picked or 'no rule'}"
            )
    return None


async def _settled(trial: Trial, drafts: list[Draft], notes: list[str]) -> list[Draft]:
    """The drafts of a file where each wins its own samples: the whole file tried, and any
    draft that loses one dropped (with the reason), until none does."""
    kept = list(drafts)
    while kept:
        for draft in kept:
            why = await losing(trial, kept, draft)
            if why is not None:
                kept.remove(draft)
                notes.append(f"{draft.route} {draft.status} {draft.code}: dropped ({why})")
                break
        else:
            return kept
    return kept


def _unique_ids(choices: list[Draft], ids: set[str]) -> list[Draft]:
    """The candidates under an id no rule of the running config has (an earlier drafts
    file included is one)."""
    base = unique = choices[0].id
    n = 2
    while unique in ids:
        unique, n = f"{base}-{n}", n + 1
    ids.add(unique)
    return [replace(choice, id=unique) for choice in choices]


def proposals(samples: Sequence[Sample], paths: tuple[JsonPath, ...]) -> list[str]:
    """`extra_message_paths` for the keys samples carry their words under and no message
    path of the running config reads."""
    read = {path.text for path in paths}
    keys = sorted(
        {
            found[0]
            for sample in samples
            if (found := unread_words(json_of(sample.body))) is not None
            and words(sample, paths)[0] == found[0]
            and found[0] not in read
        }
    )
    if not keys:
        return []
    return [
        f"extra_message_paths: {keys} in your config: the samples carry their words under "
        f"{', '.join(keys)}, which no message path reads ({MESSAGE_PATHS_DOC})"
    ]
