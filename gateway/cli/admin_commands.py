"""`mendpoint gaps` and `mendpoint followups`: a running gateway's admin API, as tables
(and `mendpoint gaps --reset`, its one write)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from gateway.cli.exits import EXIT_INVALID, EXIT_OK
from gateway.feedback.followups import Outcome
from gateway.feedback.readings import reading
from gateway.serve.admin import AdminError, admin_get, admin_token


def _admin_json(
    command: str, args: argparse.Namespace, path: str, method: str = "GET"
) -> dict[str, Any] | None:
    """GET (or POST) an admin endpoint, with the admin token when one is given; None (and a
    line on stderr) when it cannot be read."""
    try:
        payload = admin_get(args.admin, path, admin_token(args.token_file), method)
    except AdminError as exc:
        print(f"mendpoint {command}: {exc}", file=sys.stderr)
        return None
    return payload if isinstance(payload, dict) else {}


def scope_line(payload: dict[str, Any]) -> str:
    """Whose figures these are: the fleet's (a store), one host's workers, or one process."""
    scope = payload.get("scope")
    if scope == "fleet":
        return "fleet-wide: every replica sharing the fleet store (docs/operations.md#fleet)"
    note = payload.get("note")
    if isinstance(note, str):
        return f"{scope}: {note}"
    if scope == "workers":
        return "this host: every worker of this gateway"
    return "this process only (no fleet store: other replicas are not counted)"


Table = Callable[[dict[str, Any], list[dict[str, Any]]], None]


def _show(
    args: argparse.Namespace, command: str, path: str, key: str, nothing_yet: str, table: Table
) -> int:
    """The scope line, then `table` of the payload's rows under `key` (or `nothing_yet`)."""
    payload = _admin_json(command, args, path)
    if payload is None:
        return EXIT_INVALID
    rows: list[dict[str, Any]] = payload.get(key, [])
    print(scope_line(payload))
    if rows:
        table(payload, rows)
    else:
        print(nothing_yet)
    return EXIT_OK


def run_gaps(args: argparse.Namespace) -> int:
    if args.reset:
        payload = _admin_json("gaps", args, "/gaps/reset", "POST")
        if payload is None:
            return EXIT_INVALID
        print(f"gaps reset: counts start afresh ({scope_line(payload)})")
        return EXIT_OK
    path = f"/gaps?limit={max(1, args.limit)}&window_s={args.window}"
    nothing_yet = (
        f"no unmatched failures in the last {args.window} s: every failure in it matched one "
        "of your rules"
    )
    return _show(args, "gaps", path, "signatures", nothing_yet, _gaps_table)


def run_followups(args: argparse.Namespace) -> int:
    nothing_yet = "no failures followed up yet (or follow-up tracking is off)"
    return _show(args, "followups", "/followups", "codes", nothing_yet, _followups_table)


def _gaps_table(payload: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    print(f"window {payload.get('window_s')} s; open gaps first, those a rule covers after")
    print(f"{'count':>7}  {'route':<12} {'status':<22} signature")
    for row in rows:
        covered = row.get("covered_by")
        mark = f"  [covered by {covered}]" if covered else ""
        print(f"{row['count']:>7}  {row['route']:<12} {row['status']:<22} {row['signature']}{mark}")


def _followups_table(payload: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    print(f"window {payload.get('window_s')} s; wasted attempts first")
    columns = [o.value for o in Outcome]
    heads = [c.replace("retried_", "r_").replace("failed_", "f_") for c in columns]
    widths = [max(8, len(h)) for h in heads]
    cells = " ".join(f"{h:>{w}}" for h, w in zip(heads, widths, strict=True))
    print(f"{'route':<12} {'code':<24} {'failures':>8} {'open':>8} {cells}")
    for row in rows:
        counts = " ".join(f"{row.get(c, 0):>{w}}" for c, w in zip(columns, widths, strict=True))
        failures, still = row["failures"], row.get("open", 0)
        print(f"{row['route']:<12} {row['code']:<24} {failures:>8} {still:>8} {counts}")
    print()
    for row in rows:
        print(f"- {row['route']} {row['code']}: {reading(row)}")
