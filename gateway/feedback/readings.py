"""The one line an operator reads for a follow-up row (/followups, `mendpoint followups`, the
console's Agents page): the largest problem in it, in words (docs/operations.md#follow-ups).

A reading is about what callers did, so its shares are of the failures already settled: a
failure still inside its window (`open`) has no outcome yet, and a row whose every failure is
open reads as that, not as "0 % recovered". The words about `fix_required` are said only of
a code whose failures carried one (`with_fix_required`); a row that does not say (the fleet
store's) gets words that assume nothing about it.
"""

from __future__ import annotations

from typing import Any

from gateway.feedback.followups import Outcome


def reading(row: dict[str, Any]) -> str:
    """One line an operator can act on, for the largest problem in a row."""
    code = row["code"]
    failures = int(row["failures"])
    still = min(int(row.get("open", 0)), failures)
    settled = failures - still
    if settled <= 0:
        return f"all {failures} {code} failure(s) are still within the window: no outcome yet"
    later = f" ({still} more still within the window)" if still else ""
    unchanged = int(row.get(Outcome.RETRIED_UNCHANGED.value, 0))
    early = int(row.get(Outcome.RETRIED_TOO_EARLY.value, 0))
    same = int(row.get(Outcome.FAILED_AGAIN_SAME_CODE.value, 0))
    abandoned = int(row.get(Outcome.ABANDONED.value, 0))
    recovered = int(row.get(Outcome.RECOVERED.value, 0)) + int(
        row.get(Outcome.RETRIED_AS_ADVISED.value, 0)
    )
    if unchanged:
        said = f"{share(unchanged, settled)} % of callers retried {code} unchanged"
        return said + _unchanged_why(row.get("with_fix_required")) + later
    if early:
        said = f"{share(early, settled)} % of callers retried {code} before retry_after_ms"
        return said + ": backoff is ignored" + later
    if same:
        said = f"{share(same, settled)} % changed the request and failed with {code} again"
        return said + ": the advice does not fix it" + later
    if abandoned and abandoned >= recovered:
        said = f"{share(abandoned, settled)} % of callers gave up after {code}"
        return said + ": no recovery path is being found" + later
    return f"{share(recovered, settled)} % of {code} failures were recovered" + later


def _unchanged_why(with_fix: object) -> str:
    """Why callers repeat a failure that is not retryable, by what it told them."""
    if isinstance(with_fix, int) and with_fix > 0:
        return ": its fix_required is not being acted on (or it should be retryable)"
    if isinstance(with_fix, int):
        return (
            ", which names no fix_required to act on: give its rule one (or make it "
            "retryable, if it is transient)"
        )
    return ", though it is not retryable: check that its advice reaches them"


def share(part: int, whole: int) -> int:
    return round(100 * part / whole)
