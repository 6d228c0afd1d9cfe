"""`mendpoint suggest --from DIR_OR_ADMIN --config FILE --out FILE`
(docs/rules.md#drafts-from-traffic-capture-and-suggest)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from gateway.config.loader import load_config
from gateway.feedback.capture import load_dir
from gateway.feedback.signatures import MAX_WINDOW_S, GapSample
from gateway.offline.draft_check import draft_rules
from gateway.offline.draft_file import fixture_cases, render_fixtures, render_rules
from gateway.offline.suggest import Sample, sample_from_gap, samples_from_captures
from gateway.serve.admin import AdminError, admin_get, admin_token

EXIT_OK, EXIT_INVALID = 0, 1


def run_suggest(
    source: str,
    out: str,
    force: bool,
    token_file: str | None = None,
    config: str | None = None,
    window_s: int = MAX_WINDOW_S,
) -> int:
    target = Path(out)
    fixtures = target.parent / "fixtures" / f"{target.stem}.fixtures.yaml"
    if not force and (target.exists() or fixtures.exists()):
        print(f"mendpoint suggest: {target} exists; --force replaces it", file=sys.stderr)
        return EXIT_INVALID
    config = config or os.environ.get("MENDPOINT_CONFIG") or None
    if config is None:
        print(
            "mendpoint suggest: give --config FILE, the config the gateway runs: every draft is "
            "tried with it (explain on its own samples) before it is written",
            file=sys.stderr,
        )
        return EXIT_INVALID
    loaded = load_config(config)
    samples, notes = _samples(source, token_file, window_s)
    if samples is None:
        return EXIT_INVALID
    drafted = asyncio.run(draft_rules(samples, loaded))
    drafts, skipped = drafted.drafts, notes + drafted.notes
    target.write_text(render_rules(drafts, skipped, source, drafted.proposals))
    failures = sum(s.count for s in samples)
    print(
        f"wrote {target}: {len(drafts)} draft rule(s) from {failures} unmatched failure(s); "
        f"each wins its own samples with {config}"
    )
    for draft in drafts:
        print(f"  {draft.id}: {draft.count} failure(s), matched on {draft.how}")
        for note in draft.notes:
            print(f"    review: {note}")
    cases = fixture_cases(drafts)
    if cases:
        fixtures.parent.mkdir(parents=True, exist_ok=True)
        fixtures.write_text(render_fixtures(drafts, target.name))
        print(f"wrote {fixtures}: {len(cases)} case(s), the drafts' own samples")
    for proposal in drafted.proposals:
        print(f"propose: {proposal}")
    for note in skipped:
        print(f"not drafted: {note}")
    print(f"next: add {target.name} to your config's include:, then mendpoint test")
    return EXIT_OK


def _samples(
    source: str, token_file: str | None, window_s: int
) -> tuple[list[Sample] | None, list[str]]:
    if Path(source).is_dir():
        return samples_from_captures(load_dir(source))
    try:
        path = f"/gaps?limit=200&window_s={window_s}"
        payload = admin_get(source, path, admin_token(token_file))
    except AdminError as exc:
        print(f"mendpoint suggest: {source} is no directory, and {exc}", file=sys.stderr)
        return None, []
    if not isinstance(payload, dict):
        payload = {}
    samples, notes = [], []
    for row in payload.get("signatures", []):
        if not isinstance(row, dict):
            continue
        named = f"{row.get('route')} {row.get('status')} {row.get('signature')!r}"
        found = row.get("count")
        count = found if isinstance(found, int) else 1
        kept = GapSample.from_record(row.get("sample"))
        sample = None if kept is None else sample_from_gap(str(row.get("route")), count, kept)
        if sample is None:
            notes.append(f"{named} ({count} failures): no sample kept (no HTTP body to draft from)")
            continue
        samples.append(sample)
    return samples, notes
