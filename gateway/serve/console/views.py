"""What each console page shows, built from the admin sources and the offline tools.

No figure is computed here that the admin API or a CLI command does not compute already:
the gaps are /gaps's ranking, their drafts `mendpoint suggest`'s (gateway.offline.draft_check,
over the routes' capture files when a route has `capture:`, else over the sample /gaps
keeps, as `suggest --from HOST:PORT` does), the follow-up rows /followups's, and a tried
sample goes through `explain` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from multidict import CIMultiDict

from gateway.config.loaded import LoadedConfig
from gateway.config.models import GatewayConfig
from gateway.failure import TransportKind
from gateway.feedback.capture import load_dir
from gateway.feedback.followups import Outcome
from gateway.feedback.signatures import Gap as Counted
from gateway.feedback.signatures import normalise
from gateway.mcp.reported_failures import REPORTED_SUCCESS
from gateway.offline.draft_check import draft_rules
from gateway.offline.draft_file import render_rules
from gateway.offline.explain import Sample as ExplainSample
from gateway.offline.suggest import Draft, Sample, sample_from_gap
from gateway.offline.suggest import samples_from_captures as _samples_from_captures

from .window import Recent, RouteFigures

MAX_GAPS_SHOWN = 20
MAX_CAPTURES_READ = 200
"""Capture files read per route and page view: the newest. A directory may hold 1,000,000."""
DRAFT_SOURCE = "the console (/ui/gaps)"

# The chart's segments, in the order a reader scans them: what worked, what was wasted,
# what did not work, what was given up.
OUTCOME_LABELS: tuple[tuple[Outcome, str], ...] = (
    (Outcome.RECOVERED, "recovered"),
    (Outcome.RETRIED_AS_ADVISED, "retried as advised"),
    (Outcome.RETRIED_UNCHANGED, "retried unchanged"),
    (Outcome.RETRIED_TOO_EARLY, "retried too early"),
    (Outcome.FAILED_AGAIN_SAME_CODE, "failed again, same code"),
    (Outcome.FAILED_DIFFERENTLY, "failed differently"),
    (Outcome.ABANDONED, "abandoned"),
)
NOT_WORKING = (Outcome.RETRIED_UNCHANGED, Outcome.RETRIED_TOO_EARLY, Outcome.FAILED_AGAIN_SAME_CODE)
"""Outcomes that say the advice is not acted on, or does not fix the failure."""


# --- Routes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RouteRow:
    name: str
    type: str
    prefix: str
    upstream: str
    mode: str
    rollout: str
    figures: RouteFigures


def route_rows(config: GatewayConfig, recent: Recent) -> list[RouteRow]:
    empty = RouteFigures(0, (), 0, ())
    rows = []
    for spec in config.routes:
        rollout = spec.rollout
        share = (
            "every caller"
            if rollout is None or rollout.percent >= 100
            else f"{rollout.percent:g} % by {rollout.by}"
        )
        upstream = spec.upstream or (" ".join(spec.command) if spec.command else "")
        figures = recent.routes.get(spec.name, empty)
        rows.append(
            RouteRow(spec.name, spec.type, spec.prefix, upstream, spec.mode.value, share, figures)
        )
    return rows


# --- Gaps -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gap:
    route: str
    status: str
    signature: str
    count: int
    sample: Sample | None
    """A captured failure of this signature, or the one /gaps keeps (redacted either way)."""
    draft: str | None
    """The drafted rule, as the YAML file `mendpoint suggest` writes, tried on its samples."""
    note: str | None
    """Why there is no draft (a rule covers the gap, or no draft wins its samples)."""


REPORTED_NOTE = (
    "reported as a success (isError false), passed through unchanged: if this tool reports its "
    "failures this way, name them with a rule of match.mcp.is_error: false, the tool and the "
    "words (docs/rules.md#failures-reported-as-successes)"
)


async def captured(config: GatewayConfig) -> list[dict[str, Any]]:
    """The newest capture records of every route with `capture:`, read off the event loop."""
    dirs = sorted({spec.capture.dir for spec in config.routes if spec.capture is not None})
    loop = asyncio.get_running_loop()
    records: list[dict[str, Any]] = []
    for directory in dirs:
        records += await loop.run_in_executor(None, load_dir, directory, MAX_CAPTURES_READ)
    return records


async def gaps(
    top: Sequence[Counted], records: list[dict[str, Any]], loaded: LoadedConfig
) -> list[Gap]:
    """Each signature with its samples and a draft tried on them (`mendpoint suggest`'s):
    its captured failures where the route captures them, else the sample /gaps keeps."""
    samples, _ = _samples_from_captures(records)
    by_signature: dict[tuple[str, str, str], list[Sample]] = {}
    for sample in samples:
        key = (sample.route, str(sample.status), normalise(sample.message))
        by_signature.setdefault(key, []).append(sample)
    chosen: dict[tuple[str, str, str], list[Sample]] = {}
    for gap in top:
        signature = gap.signature
        key = (signature.route, signature.status, signature.text)
        found = by_signature.get(key)
        if not found and gap.sample is not None:
            kept = sample_from_gap(signature.route, gap.count, gap.sample)
            found = [kept] if kept is not None else []
        if found:
            chosen[key] = found
    drafted = await draft_rules([s for group in chosen.values() for s in group], loaded)
    shown = []
    for gap in top:
        signature = gap.signature
        found = chosen.get((signature.route, signature.status, signature.text))
        outcome = drafted.by_sample.get(id(found[0])) if found else None
        draft = outcome if isinstance(outcome, Draft) else None
        note = outcome if isinstance(outcome, str) else None
        if signature.status == REPORTED_SUCCESS:
            note = REPORTED_NOTE
        elif not found:
            note = "no draft: no sample of this failure is kept (an MCP or transport failure)"
        shown.append(
            Gap(
                signature.route,
                signature.status,
                signature.text,
                gap.count,
                found[0] if found else None,
                None if draft is None else render_rules([draft], [], DRAFT_SOURCE),
                note,
            )
        )
    return shown


# --- Agents -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentRow:
    route: str
    code: str
    rule: str
    failures: int
    outcomes: tuple[tuple[Outcome, str, int], ...]
    """(outcome, label, count) in chart order."""
    not_working: float
    """The share of failures whose follow-up shows the advice not acted on or not working."""


def agent_rows(rows: list[dict[str, Any]]) -> list[AgentRow]:
    """The /followups rows, the codes whose advice works worst first."""
    shown = []
    for row in rows:
        failures = int(row.get("failures", 0))
        outcomes = tuple((o, label, int(row.get(o.value, 0))) for o, label in OUTCOME_LABELS)
        bad = sum(int(row.get(o.value, 0)) for o in NOT_WORKING)
        shown.append(
            AgentRow(
                str(row.get("route", "")),
                str(row.get("code", "")),
                str(row.get("rule", "")),
                failures,
                outcomes,
                bad / failures if failures else 0.0,
            )
        )
    return sorted(shown, key=lambda r: (-r.not_working, -r.failures, r.route, r.code))


# --- Try a rule -------------------------------------------------------------------------------


def capture_choices(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(request id, one line) for each capture, newest first."""
    choices = []
    for record in reversed(records):
        request = record.get("request", {})
        response = record.get("response", {})
        what = response.get("status") or response.get("transport")
        line = (
            f"{record.get('route')} {request.get('method')} {request.get('path')} → {what} "
            f"{record.get('classified', {}).get('code', '')}"
        )
        choices.append((str(record.get("request_id", "")), line))
    return choices


def sample_from_capture(record: dict[str, Any]) -> ExplainSample:
    """A capture record as `explain` takes it (its body as redacted when captured)."""
    request = record.get("request", {})
    response = record.get("response", {})
    transport = response.get("transport")
    status = response.get("status")
    return ExplainSample(
        method=str(request.get("method", "GET")),
        path=str(request.get("path", "/")),
        status=status if isinstance(status, int) else None,
        headers=CIMultiDict({str(k): str(v) for k, v in response.get("headers", {}).items()}),
        body=str(response.get("body", "")).encode(),
        transport=TransportKind(transport) if transport and status is None else None,
    )
