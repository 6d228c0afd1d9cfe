"""Content negotiation for failures: does the request's `Accept` prefer JSON over HTML?

In `additive` mode an HTML or text error page reaches a client that asked for JSON with no
message and no fix. When the client named a JSON type and ranks it above HTML, the gateway
answers with the envelope instead (docs/configuration.md, `routes[].json_for_json_clients`);
a browser, whose `Accept` ranks `text/html` first, still gets the page.

Takes the `Accept` header's value (RFC 9110 §12.5.1); returns a bool. Only the failure path
calls it. The rules:

- JSON is asked for only by name: `application/json`, a `+json` type
  (`application/problem+json`, `application/vnd.api+json`) or `*/*+json`-style suffix ranges.
  `*/*`, `application/*` and `text/*` name no JSON, so they are not a preference.
- HTML (`text/html`, `application/xhtml+xml`) is ranked by the most specific range that
  covers it: `text/html` itself, else `text/*`, else `*/*`, as RFC 9110 reads `Accept`.
- JSON wins on a higher q-value, or on an equal one when HTML is reached only through a
  wildcard (`application/json, */*` is what axios and many SDKs send). Two exact types at
  the same q (`application/json, text/html`) are no preference: the original bytes go out.
- `q=0` means "not acceptable"; a malformed q-value makes its range count as absent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HTML_TYPES = frozenset({("text", "html"), ("application", "xhtml+xml")})
QVALUE = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")
MAX_RANGES = 64
"""Ranges looked at; an `Accept` longer than any real client's is read only that far."""


@dataclass(frozen=True, slots=True)
class MediaRange:
    type: str
    subtype: str
    q: float

    @property
    def names_json(self) -> bool:
        return self.subtype == "json" or self.subtype.endswith("+json")

    @property
    def specificity(self) -> int:
        """2 for `type/subtype`, 1 for `type/*`, 0 for `*/*`."""
        if self.type == "*":
            return 0
        return 1 if self.subtype == "*" else 2

    def covers(self, type_: str, subtype: str) -> bool:
        if self.type == "*":
            return True
        return self.type == type_ and self.subtype in ("*", subtype)


def parse(accept: str) -> list[MediaRange]:
    """The media ranges of an `Accept` value, lower-cased; malformed ones left out."""
    ranges = []
    for item in accept.split(",", MAX_RANGES)[:MAX_RANGES]:
        media, _, params = item.partition(";")
        type_, slash, subtype = media.strip().lower().partition("/")
        if not slash or not type_ or not subtype or (type_ == "*" and subtype != "*"):
            continue
        q = _q(params)
        if q is not None:
            ranges.append(MediaRange(type_, subtype, q))
    return ranges


def prefers_json(accept: str | None) -> bool:
    """True when `accept` names a JSON type and ranks it above HTML (see the module doc)."""
    if not accept or "json" not in accept.lower():
        return False
    ranges = parse(accept)
    json_rank = max(
        ((r.q, r.specificity) for r in ranges if r.names_json and r.q > 0), default=None
    )
    if json_rank is None:
        return False
    return json_rank > _html_rank(ranges)


def _html_rank(ranges: list[MediaRange]) -> tuple[float, int]:
    """(q, specificity) of the best-ranked HTML type, each by its most specific range."""
    best = (0.0, -1)
    for type_, subtype in HTML_TYPES:
        covering = [r for r in ranges if r.covers(type_, subtype)]
        if not covering:
            continue
        most_specific = max(r.specificity for r in covering)
        # Several ranges equally specific (`text/html;level=1, text/html`): the best q counts.
        q = max(r.q for r in covering if r.specificity == most_specific)
        if q > 0:
            best = max(best, (q, most_specific))
    return best


def _q(params: str) -> float | None:
    """The `q` parameter (1 when absent); None when it is not a valid qvalue."""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() != "q":
            continue
        value = value.strip()
        return float(value) if QVALUE.fullmatch(value) else None
    return 1.0
