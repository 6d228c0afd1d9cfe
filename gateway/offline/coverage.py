"""Which rule the running config picks for a gap's sample: the signature's `covered_by`
(docs/operations.md#gaps).

A signature counts failures that only a shipped fallback named when they happened. Once a
rule of the operator's names them (written, reloaded), or when the fallback that named them
is a shipped retryable one (a 429, a 503: its advice stands, and a draft never says
retryable), the gap is closed: /gaps still lists it, with the rule's id, and nobody drafts a
rule for it. The decision is `explain`'s, the same step the proxy runs, on the signature's
redacted sample, so what /gaps says is what the gateway now does.

Evaluated lazily, once per signature and config: a reload builds a new `LoadedConfig`, and
the first /gaps after it evaluates every listed signature again (a few milliseconds each).
"""

from __future__ import annotations

from multidict import CIMultiDict

from gateway.config.loaded import LoadedConfig
from gateway.enrich.step import Enricher
from gateway.failure import TransportKind
from gateway.feedback.signatures import Gap, GapSample, Signature
from gateway.offline.explain import Sample, SampleError, explain

MAX_REMEMBERED = 1000
"""Signatures whose coverage is kept per config; past it the memory starts again."""


def explain_sample(sample: GapSample) -> Sample | None:
    """A gap's sample as `explain` takes it; None for a transport fault it does not name."""
    transport = None
    if sample.status is None:
        if sample.transport not in {kind.value for kind in TransportKind}:
            return None
        transport = TransportKind(str(sample.transport))
    return Sample(
        method=sample.method,
        path=sample.path,
        status=sample.status,
        headers=CIMultiDict(sample.headers),
        body=sample.body.encode(),
        transport=transport,
    )


def covering(rule_id: str, is_default: bool, retryable: bool) -> str | None:
    """The rule that closes a gap: any rule of the operator's, or a shipped fallback that
    calls the failure retryable; a fallback that does not leaves it open (None)."""
    return rule_id if not is_default or retryable else None


async def covering_rule(
    loaded: LoadedConfig, sample: Sample, enricher: Enricher | None = None
) -> str | None:
    """The id of the rule that closes the gap `sample` stands for under `loaded`, or None."""
    try:
        result = await explain(loaded, sample, enricher=enricher)
    except SampleError:  # its path is no route's any more: nothing covers it
        return None
    verdict = result.verdict
    if verdict is None:
        return None
    rule = verdict.rule
    return covering(rule.id, rule.is_default, rule.error.retryable)


class Coverage:
    """`covered_by` for the gaps /gaps lists, remembered per signature until the config
    changes."""

    def __init__(self) -> None:
        self._loaded: LoadedConfig | None = None
        self._enricher: Enricher | None = None
        self._known: dict[Signature, str | None] = {}

    async def covered_by(self, loaded: LoadedConfig, gap: Gap) -> str | None:
        if loaded is not self._loaded or self._enricher is None:
            self._loaded, self._enricher, self._known = loaded, Enricher.offline(loaded), {}
        if gap.sample is None:
            return None
        if gap.signature in self._known:
            return self._known[gap.signature]
        sample = explain_sample(gap.sample)
        found = None if sample is None else await covering_rule(loaded, sample, self._enricher)
        if len(self._known) >= MAX_REMEMBERED:
            self._known.clear()
        self._known[gap.signature] = found
        return found
