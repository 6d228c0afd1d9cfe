"""Answers to repeated failures, kept: the verdict, its recovery block and the rendered bytes.

The same 404, 429 or validation body arrives again and again; classifying, resolving and
rendering it costs the same every time. `AnswerCache` keeps, per config (a reload builds a new
one), what the enrichment step made of one failure, keyed on everything that answer depends on
(`gateway.http.cached_answers.CachedAnswers.answer_key`), in a least-recently-used map bounded by
entries and by
bytes (`limits.answer_cache_entries`, `limits.answer_cache_bytes`).

What differs between two requests that meet the same failure is filled in per request: the
rendering is made once with a sentinel request id and a sentinel duration, cut at them, and
each answer joins the pieces with its own request id (escaped as JSON) and `meta.duration_ms`.
Only bodies whose inserted text is ASCII as itself (UTF-8, Latin-1, ...) are kept that way;
the rest are not kept. The counters, the access record and captures are per request too: the
enrichment step replays them on a hit (docs/performance.md, the answer cache).
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import re
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from gateway.classify import Observation, Verdict
from gateway.exchange.answer import JSON_TYPE, Rendering, retry_after_value
from gateway.failure import Recovery
from gateway.text.body_text import body_text

ENTRY_OVERHEAD_BYTES = 512
"""What an entry costs besides its body and key bytes (objects, tuples, the map's slot)."""
_PRINTABLE_ASCII = "".join(chr(c) for c in range(0x20, 0x7F))


REQUEST_ID, DURATION, RETRY_DELAY = 0, 1, 2
"""What a hole in a kept body is filled with: the request id, `meta.duration_ms`, or the
retry delay (`retry_after_ms`) of a verdict whose delay counts down to an instant."""


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """One failure's verdict, recovery block and rendering, its per-request parts cut out.

    `pieces` is the body split at the request id, the duration and a timed retry delay;
    `holes[i]` says which of them goes between `pieces[i]` and `pieces[i + 1]`.
    """

    verdict: Verdict
    recovery: Recovery
    resolved: bool
    """The recovery came from the resolver (not `original` mode): a hit counts it again."""
    rendering: Rendering | None
    pieces: tuple[bytes, ...]
    holes: tuple[int, ...]
    size: int
    timed: bool = False
    """The retry delay counts down to an instant (a `Retry-After` HTTP-date, a Unix-time
    reset): it is worked out again for each request and filled in."""
    retry_header: int | None = None
    """Where in `rendering.headers` the `Retry-After` of a timed delay goes."""

    def answer(
        self, request_id: str, duration_ms: int, retry_after_ms: int | None = None
    ) -> Rendering | None:
        """The rendering for one request: its own request id, duration and (timed) delay."""
        rendering = self.rendering
        if rendering is None:
            return None
        headers = rendering.headers
        if self.retry_header is not None and retry_after_ms is not None:
            headers = list(headers)
            headers[self.retry_header] = ("Retry-After", retry_after_value(retry_after_ms))
        if not self.holes:
            if headers is rendering.headers:
                return rendering
            return Rendering(headers, rendering.body, rendering.content_type)
        escaped = json_string_text(request_id).encode("ascii")
        duration = str(duration_ms).encode("ascii")
        out = [self.pieces[0]]
        for hole, piece in zip(self.holes, self.pieces[1:], strict=True):
            if hole == REQUEST_ID:
                out.append(escaped)
            elif hole == DURATION:
                out.append(duration)
            else:
                out.append(b"null" if retry_after_ms is None else str(retry_after_ms).encode())
            out.append(piece)
        return Rendering(headers, b"".join(out), rendering.content_type)


class AnswerCache:
    """A bounded LRU of `CachedAnswer`s for one config; not shared across reloads."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, CachedAnswer] = OrderedDict()
        token = os.urandom(12).hex()
        self.request_id = f"mendpoint{token}"
        """Rendered in place of the request id; random, so no upstream body can hold it."""
        self.duration_ms = _random_digits()
        """Rendered in place of `meta.duration_ms`: 18 random digits."""
        self.retry_after_ms = _random_digits()
        """Rendered in place of a retry delay that counts down to an instant."""
        self._sentinels = {
            self.request_id.encode("ascii"): REQUEST_ID,
            str(self.duration_ms).encode("ascii"): DURATION,
            str(self.retry_after_ms).encode("ascii"): RETRY_DELAY,
        }
        self._holes = re.compile(b"(" + b"|".join(map(re.escape, self._sentinels)) + b")")

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> CachedAnswer | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def keep(
        self,
        key: Hashable,
        obs: Observation,
        verdict: Verdict,
        recovery: Recovery,
        resolved: bool,
        template: Rendering | None,
        timed: bool = False,
    ) -> CachedAnswer | None:
        """Keep the answer rendered with the sentinels (`timed`: with the retry delay's too);
        None when it cannot be kept safely (then the caller renders this request's answer)."""
        entry = self._entry(obs, verdict, recovery, resolved, template, timed)
        if entry is None or entry.size > self.max_bytes:
            return entry
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        self._entries[key] = entry
        self.bytes += entry.size
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= evicted.size
        return entry

    def _entry(
        self,
        obs: Observation,
        verdict: Verdict,
        recovery: Recovery,
        resolved: bool,
        template: Rendering | None,
        timed: bool,
    ) -> CachedAnswer | None:
        body = None if template is None else template.body
        size = ENTRY_OVERHEAD_BYTES + len(obs.body or b"") + len(obs.path)
        retry_header = None
        if template is not None and timed:
            wanted = ("Retry-After", retry_after_value(self.retry_after_ms))
            retry_header = next((i for i, h in enumerate(template.headers) if h == wanted), None)
        if template is None or body is None:
            return CachedAnswer(
                verdict, recovery, resolved, template, (), (), size, timed, retry_header
            )
        if obs.body is not None and any(s in obs.body for s in self._sentinels):
            return None
        if not _ascii_as_itself(_inserted_charset(obs, template)):
            return None
        parts = self._holes.split(body)
        pieces = tuple(parts[0::2])
        holes = tuple(self._sentinels[p] for p in parts[1::2])
        size += len(body)
        return CachedAnswer(
            verdict, recovery, resolved, template, pieces, holes, size, timed, retry_header
        )


def _random_digits() -> int:
    """18 random digits: no upstream body or other sentinel holds them by chance."""
    return int.from_bytes(os.urandom(7), "big") + 10**17


def json_string_text(value: str) -> str:
    """`value` as the inside of a JSON string, as the renderers write it."""
    if '"' not in value and "\\" not in value and value.isprintable():
        return value
    return json.dumps(value, ensure_ascii=False)[1:-1]


def fillable(request_id: str) -> bool:
    """A request id the cache can fill in: printable ASCII (every id the gateway uses)."""
    return request_id.isascii() and request_id.isprintable()


def _inserted_charset(obs: Observation, template: Rendering) -> str | None:
    """The charset the gateway's text in the body is written in: UTF-8 for an envelope, the
    upstream body's own for additive insertion (None when it cannot be told)."""
    if template.content_type == JSON_TYPE:
        return "utf-8"
    if template.content_type is not None or obs.body is None:
        return None
    decoded = body_text(obs.body, obs.content_type)
    return None if decoded is None else decoded.encoding


@functools.lru_cache(maxsize=64)
def _ascii_as_itself(encoding: str | None) -> bool:
    """Printable ASCII encodes to the same bytes, character by character (not UTF-16/7)."""
    if encoding is None:
        return False
    try:
        codecs.lookup(encoding)
        return all(c.encode(encoding) == c.encode("ascii") for c in _PRINTABLE_ASCII) and (
            _PRINTABLE_ASCII.encode(encoding) == _PRINTABLE_ASCII.encode("ascii")
        )
    except (LookupError, UnicodeError):
        return False
