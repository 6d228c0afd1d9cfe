"""The corpus's figures: right first action per stack and overall (HTTP and MCP apart), the
always-retry baseline, message fidelity, success pass-through, and the misses with what the
gateway answered (docs/packs/corpus.md#the-report)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, get_args

from tests.first_action.model import HeldOut
from tests.first_action.outcome import Outcome, Suite


@dataclass(frozen=True)
class Tally:
    right: int
    total: int

    @property
    def rate(self) -> float:
        return self.right / self.total if self.total else 0.0

    def text(self) -> str:
        return f"{self.right}/{self.total} ({100 * self.rate:.0f}%)" if self.total else "-"

    def to_json(self) -> dict[str, Any]:
        return {"right": self.right, "total": self.total, "rate": round(self.rate, 4)}


def tally(outcomes: Iterable[Outcome], test: str) -> Tally:
    chosen = list(outcomes)
    if test == "first_action":
        scored = [o for o in chosen if o.scored]
        return Tally(sum(o.right for o in scored), len(scored))
    if test == "always_retry":
        scored = [o for o in chosen if o.scored]
        return Tally(sum(o.expect == "retry" for o in scored), len(scored))
    if test == "fidelity":
        scored = [o for o in chosen if o.scored and o.kept is not None]
        return Tally(sum(o.kept is True for o in scored), len(scored))
    if test == "success":
        scored = [o for o in chosen if not o.failure]
        return Tally(sum(o.right for o in scored), len(scored))
    if test == "with_words":
        scored = [o for o in chosen if o.scored and not o.wordless]
        return Tally(sum(o.right for o in scored), len(scored))
    if test == "without_words":
        scored = [o for o in chosen if o.scored and o.wordless]
        return Tally(sum(o.right for o in scored), len(scored))
    raise ValueError(test)


TESTS = ("first_action", "always_retry", "fidelity", "success")
WORDS = ("with_words", "without_words")
"""First action apart on failures whose text says something and on those that say nothing
beyond failing (`outcome.says_nothing`): the first is what a reading can reach."""
SUITES: tuple[tuple[Suite, str], ...] = (
    ("http", "HTTP stacks"),
    ("mcp", "MCP servers"),
)


def miss_class(outcome: Outcome) -> str:
    """A coarse, mechanical grouping: what came back, what was due, what was taken."""
    code = outcome.reading.code if outcome.reading else "-"
    if outcome.expect == "success":
        return f"success not passed through ({outcome.kind})"
    return f"{outcome.kind}: due {outcome.expect}, took {outcome.got} ({code or '-'})"


@dataclass(frozen=True)
class Report:
    outcomes: list[Outcome]
    failed: dict[str, str]
    seconds: dict[str, float]

    def suite(self, suite: Suite) -> list[Outcome]:
        return [o for o in self.outcomes if o.suite == suite]

    def part(self, suite: Suite, held_out: HeldOut | None) -> list[Outcome]:
        """The tuned stacks' outcomes (None), or one held-out set's
        (docs/packs/corpus.md#the-held-out-sets)."""
        return [o for o in self.suite(suite) if o.held_out == held_out]

    def held_out_sets(self, suite: Suite) -> dict[HeldOut, list[Outcome]]:
        """Each held-out set's outcomes, apart: sets chosen differently are never pooled."""
        grouped: dict[HeldOut, list[Outcome]] = {}
        for outcome in self.suite(suite):
            if outcome.held_out is not None:
                grouped.setdefault(outcome.held_out, []).append(outcome)
        return {name: grouped[name] for name in get_args(HeldOut) if name in grouped}

    def stacks(self, suite: Suite) -> dict[str, list[Outcome]]:
        grouped: dict[str, list[Outcome]] = defaultdict(list)
        for outcome in self.suite(suite):
            grouped[outcome.stack].append(outcome)
        return dict(sorted(grouped.items()))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"failed_to_start": self.failed, "seconds": self.seconds}
        for suite, _title in SUITES:
            stacks = self.stacks(suite)
            out[suite] = {
                "overall": {t: tally(self.suite(suite), t).to_json() for t in TESTS + WORDS},
                "tuned": {t: tally(self.part(suite, None), t).to_json() for t in TESTS},
                "held_out": {
                    name: {t: tally(items, t).to_json() for t in TESTS}
                    for name, items in self.held_out_sets(suite).items()
                },
                "stacks": {
                    name: {t: tally(items, t).to_json() for t in TESTS}
                    for name, items in stacks.items()
                },
            }
        out["outcomes"] = [o.to_json() for o in self.outcomes]
        return out

    def text(self) -> str:
        lines: list[str] = []
        for suite, title in SUITES:
            outcomes = self.suite(suite)
            stacks = self.stacks(suite)
            failed = {k: v for k, v in self.failed.items() if k.startswith(f"{suite}:")}
            if not outcomes and not failed:
                continue
            lines.append(f"== {title}: {len(stacks)} ran, {len(failed)} failed to start")
            lines.append(
                f"{'stack':28} {'first action':>14} {'always-retry':>14} "
                f"{'fidelity':>14} {'successes':>12}"
            )
            for name, items in stacks.items():
                lines.append(_row(name, items))
            lines.append(_row("OVERALL", outcomes))
            held_out = self.held_out_sets(suite)
            if held_out:
                lines.append(_row("  tuned stacks", self.part(suite, None)))
            for name, items in held_out.items():
                lines.append(_row(f"  held-out set: {name}", items))
            with_words, without = (tally(outcomes, t) for t in WORDS)
            if without.total:
                lines.append(
                    f"  first action, texts with words {with_words.text()}; texts that say "
                    f"nothing beyond failing {without.text()} (they keep the terminal default)"
                )
            for name, why in failed.items():
                lines.append(f"  did not start: {name}: {why[:300]}")
            lines.extend(_misses(outcomes))
            lines.append("")
        return "\n".join(lines)


def _row(name: str, items: list[Outcome]) -> str:
    cells = [tally(items, t).text() for t in TESTS]
    return f"{name:28} {cells[0]:>14} {cells[1]:>14} {cells[2]:>14} {cells[3]:>12}"


def _misses(outcomes: list[Outcome]) -> list[str]:
    lines: list[str] = []
    wrong = [o for o in outcomes if not o.right and (o.scored or not o.failure)]
    masked = [o for o in outcomes if o.failure and o.reported_as_success]
    lost = [o for o in outcomes if o.right and o.kept is False]
    if wrong:
        lines.append(f"-- misses ({len(wrong)}), by class:")
        for name, count in Counter(miss_class(o) for o in wrong).most_common():
            lines.append(f"   {count:3}  {name}")
        for outcome in wrong:
            lines.append(
                f"   * {outcome.stack}/{outcome.scenario}: due {outcome.expect}, "
                f"took {outcome.got}: {outcome.reason}"
            )
            lines.append(f"       upstream: {outcome.upstream}")
            if outcome.reading:
                lines.append(f"       gateway:  {outcome.reading.summary()[:400]}")
            for problem in outcome.problems:
                lines.append(f"       problem:  {problem[:400]}")
    if lost:
        lines.append(f"-- right action, words lost ({len(lost)}):")
        for outcome in lost:
            message = outcome.reading.message if outcome.reading else ""
            lines.append(
                f"   * {outcome.stack}/{outcome.scenario}: wanted {outcome.words!r}, "
                f"message {message[:200]!r}"
            )
    if masked:
        lines.append(
            f"-- failures the upstream reports as successes, passed through by contract and "
            f"not scored ({len(masked)}):"
        )
        for outcome in masked:
            lines.append(f"   * {outcome.stack}/{outcome.scenario}: {outcome.upstream[:200]}")
    odd = [o for o in outcomes if o.right and o.problems]
    if odd:
        lines.append(f"-- scenario problems ({len(odd)}):")
        for outcome in odd:
            for problem in outcome.problems:
                lines.append(f"   * {outcome.stack}/{outcome.scenario}: {problem[:400]}")
    return lines
