"""The one line an operator reads for a follow-up row (/followups, `mendpoint followups`, the
console's Agents page): the largest problem in it, in words (docs/operations.md#follow-ups)."""

from __future__ import annotations

from typing import Any

from gateway.feedback.followups import Outcome


def reading(row: dict[str, Any]) -> str:
    """One line an operator can act on, for the largest problem in a row."""
    failures = max(int(row["failures"]), 1)
    code = row["code"]
    unchanged = int(row.get(Outcome.RETRIED_UNCHANGED.value, 0))
    early = int(row.get(Outcome.RETRIED_TOO_EARLY.value, 0))
    same = int(row.get(Outcome.FAILED_AGAIN_SAME_CODE.value, 0))
    abandoned = int(row.get(Outcome.ABANDONED.value, 0))
    recovered = int(row.get(Outcome.RECOVERED.value, 0)) + int(
        row.get(Outcome.RETRIED_AS_ADVISED.value, 0)
    )
    if unchanged:
        share = round(100 * unchanged / failures)
        return (
            f"{share} % of callers retried {code} unchanged: its fix_required is not being "
            "acted on (or it should be retryable)"
        )
    if early:
        share = round(100 * early / failures)
        return f"{share} % of callers retried {code} before retry_after_ms: backoff is ignored"
    if same:
        share = round(100 * same / failures)
        return (
            f"{share} % changed the request and failed with {code} again: "
            "the advice does not fix it"
        )
    if abandoned and abandoned >= recovered:
        share = round(100 * abandoned / failures)
        return f"{share} % of callers gave up after {code}: no recovery path is being found"
    return f"{round(100 * recovered / failures)} % of {code} failures were recovered"
