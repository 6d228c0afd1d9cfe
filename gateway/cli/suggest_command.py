"""`mendpoint suggest --from DIR_OR_ADMIN --out FILE` (docs/rules.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from gateway.feedback.capture import load_dir
from gateway.offline.suggest import (
    Sample,
    drafts_from,
    fixture_cases,
    render_fixtures,
    render_rules,
    sample_from_signature,
    samples_from_captures,
)
from gateway.serve.admin import AdminError, admin_get, admin_token

EXIT_OK, EXIT_INVALID = 0, 1


def run_suggest(source: str, out: str, force: bool, token_file: str | None = None) -> int:
    target = Path(out)
    fixtures = target.parent / "fixtures" / f"{target.stem}.fixtures.yaml"
    if not force and (target.exists() or fixtures.exists()):
        print(f"mendpoint suggest: {target} exists; --force replaces it", file=sys.stderr)
        return EXIT_INVALID
    samples, notes = _samples(source, token_file)
    if samples is None:
        return EXIT_INVALID
    drafts, skipped = drafts_from(samples)
    target.write_text(render_rules(drafts, notes + skipped, source))
    print(f"wrote {target}: {len(drafts)} draft rule(s) from {len(samples)} unmatched failure(s)")
    cases = fixture_cases(drafts)
    if cases:
        fixtures.parent.mkdir(parents=True, exist_ok=True)
        fixtures.write_text(render_fixtures(drafts, target.name))
        print(f"wrote {fixtures}: {len(cases)} case(s)")
    for note in skipped:
        print(f"not drafted: {note}")
    print(f"next: add {target.name} to your config's include:, then mendpoint test")
    return EXIT_OK


def _samples(source: str, token_file: str | None) -> tuple[list[Sample] | None, list[str]]:
    if Path(source).is_dir():
        return samples_from_captures(load_dir(source))
    try:
        payload = admin_get(source, "/gaps?limit=200", admin_token(token_file))
    except AdminError as exc:
        print(f"mendpoint suggest: {source} is no directory, and {exc}", file=sys.stderr)
        return None, []
    if not isinstance(payload, dict):
        payload = {}
    samples = []
    for row in payload.get("signatures", []):
        status = row.get("status", "")
        if not str(status).isdigit():
            continue
        text = str(row.get("signature", ""))
        samples.append(sample_from_signature(str(row.get("route")), int(status), text))
    note = "from /gaps: signatures only (no bodies, paths or fixtures); capture: gives more"
    return samples, [note]
