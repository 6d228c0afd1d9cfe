"""An edited draft tried before it is saved: the console's "Try" (docs/operations.md#console).

Takes the rule file text a reader edited (the `rules:` document `mendpoint suggest` writes)
and the samples to run it on (a gap's own, every capture the console reads), and returns,
for each sample, the rule the running config picks, the rule the running config plus the
draft picks, and the exact answer (status, headers, body) the caller would then get in the
route's mode. Nothing is evaluated here: the draft joins the config as a drafts file
included last (gateway.offline.draft_check.Trial, the loader's own order and checks), and
each sample goes through `explain`. Nothing is reloaded or written but a temporary file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.config.errors import ConfigError
from gateway.config.loaded import LoadedConfig
from gateway.config.yamlsrc import parse_yaml
from gateway.enrich.step import Enricher
from gateway.exchange.routes import RouteTable
from gateway.failure import Mode
from gateway.offline.draft_check import DRAFTS_FILE, Trial
from gateway.offline.explain import Answer, Sample, SampleError, explain

MAX_DRAFT_BYTES = 64 << 10
"""A drafted rule file is a few hundred bytes; a posted one larger than this is refused."""


class DraftRefused(ValueError):
    """The posted text is not a rule file that loads with the running config; says why."""


@dataclass(frozen=True, slots=True)
class TriedSample:
    """One sample under the running config and under the config with the draft."""

    label: str
    sample: Sample
    route: str | None
    before: str | None
    """The rule the running config picks (None: no rule; the answer passes through)."""
    after: str | None
    """The rule the running config plus the draft picks."""
    answer: Answer | None
    """What the caller would get with the draft, in the route's mode."""
    error: str | None = None
    """Why the sample could not be evaluated (no route serves its path)."""
    before_default: bool = False
    """Whether `before` is a shipped fallback (http-defaults), which any draft may take."""

    def state(self, ids: tuple[str, ...]) -> str:
        """`taken` (a draft's rule now names it, another rule of the operator's or of a
        pack did before), `matched` (a draft's rule names it, a fallback or nothing did),
        `other` (the draft does not name it) or `error`."""
        if self.error is not None:
            return "error"
        if self.after not in ids:
            return "other"
        if self.before is not None and self.before != self.after and not self.before_default:
            return "taken"
        return "matched"


@dataclass(frozen=True, slots=True)
class TryResult:
    ids: tuple[str, ...]
    """The draft's rule ids, in the order they match in."""
    samples: tuple[TriedSample, ...]

    @property
    def matched(self) -> tuple[TriedSample, ...]:
        """The samples a rule of the draft now names."""
        return tuple(s for s in self.samples if s.state(self.ids) in ("matched", "taken"))

    @property
    def taken(self) -> tuple[TriedSample, ...]:
        """The samples the draft takes from a rule, not a shipped fallback, that named them."""
        return tuple(s for s in self.samples if s.state(self.ids) == "taken")


def draft_rules_data(text: str) -> dict[str, object]:
    """The posted text as data: a mapping with a `rules:` list, nothing else (DraftRefused)."""
    if len(text.encode()) > MAX_DRAFT_BYTES:
        raise DraftRefused(f"a draft may be at most {MAX_DRAFT_BYTES} bytes")
    try:
        doc = parse_yaml(text, "the draft")
    except ConfigError as exc:
        raise DraftRefused(str(exc)) from None
    data = doc.data
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list) or not data["rules"]:
        raise DraftRefused("a draft is a mapping with a non-empty `rules:` list")
    others = sorted(set(data) - {"rules"})
    if others:
        raise DraftRefused(f"a draft holds `rules:` only, not {', '.join(others)}")
    return data


async def try_draft(
    loaded: LoadedConfig, text: str, samples: Sequence[tuple[str, Sample]]
) -> TryResult:
    """Each of `samples` (label, sample) under `loaded` and under `loaded` plus the draft
    `text` (DraftRefused when the draft is not a rule file that loads with it)."""
    draft_rules_data(text)
    with tempfile.TemporaryDirectory(prefix="mendpoint-try-") as directory:
        trial = Trial(loaded, os.path.join(directory, DRAFTS_FILE))
        try:
            with_draft = trial.with_drafts(text)
        except ConfigError as exc:
            raise DraftRefused(str(exc).replace(trial.path, "the draft")) from None
        ids = tuple(r.spec.id for r in with_draft.rules if r.source.file == trial.path)
        before, after = Enricher.offline(loaded), Enricher.offline(with_draft)
        routes = RouteTable(loaded.config.routes)
        tried = [
            await _tried(label, sample, loaded, with_draft, before, after, routes)
            for label, sample in samples
        ]
    return TryResult(ids, tuple(tried))


async def _tried(
    label: str,
    sample: Sample,
    loaded: LoadedConfig,
    with_draft: LoadedConfig,
    before: Enricher,
    after: Enricher,
    routes: RouteTable,
) -> TriedSample:
    route, _ = routes.resolve(sample.path)
    mode = route.spec.mode if route is not None else Mode.ENVELOPE
    try:
        old = await explain(loaded, sample, mode, enricher=before)
        new = await explain(with_draft, sample, mode, enricher=after)
    except SampleError as exc:
        return TriedSample(label, sample, None, None, None, None, str(exc))
    return TriedSample(
        label,
        sample,
        new.route,
        None if old.verdict is None else old.verdict.rule.id,
        None if new.verdict is None else new.verdict.rule.id,
        new.answer,
        before_default=old.verdict is not None and old.verdict.rule.is_default,
    )
