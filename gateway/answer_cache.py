"""Answers to repeated failures, kept: the verdict, its recovery block and the rendered bytes.

The same 404, 429 or validation body arrives again and again; classifying, resolving and
rendering it costs the same every time. `AnswerCache` keeps, per config (a reload builds a new
one), what the enrichment step made of one failure, keyed on everything that answer depends on
(`gateway.enrich.Enricher.answer_key`), in a least-recently-used map bounded by entries and by
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

from gateway.body_text import body_text
from gateway.classify import Observation, Verdict
from gateway.envelope import JSON_TYPE, Rendering
from gateway.failure import Recovery

ENTRY_OVERHEAD_BYTES = 512
"""What an entry costs besides its body and key bytes (objects, tuples, the map's slot)."""
_PRINTABLE_ASCII = "".join(chr(c) for c in range(0x20, 0x7F))


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """One failure's verdict, recovery block and rendering, its per-request parts cut out.

    `pieces` is the body split at the request id and duration; `holes[i]` says which of the
    two goes between `pieces[i]` and `pieces[i + 1]` (True: the request id).
    """

    verdict: Verdict
    recovery: Recovery
    resolved: bool
    """The recovery came from the resolver (not `original` mode): a hit counts it again."""
    rendering: Rendering | None
    pieces: tuple[bytes, ...]
    holes: tuple[bool, ...]
    size: int

    def answer(self, request_id: str, duration_ms: int) -> Rendering | None:
        """The rendering for one request: its own request id and duration filled in."""
        rendering = self.rendering
        if rendering is None or not self.holes:
            return rendering
        escaped = json_string_text(request_id).encode("ascii")
        duration = str(duration_ms).encode("ascii")
        out = [self.pieces[0]]
        for is_id, piece in zip(self.holes, self.pieces[1:], strict=True):
            out.append(escaped if is_id else duration)
            out.append(piece)
        return Rendering(rendering.headers, b"".join(out), rendering.content_type)


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
        self.duration_ms = int.from_bytes(os.urandom(7), "big") + 10**17
        """Rendered in place of `meta.duration_ms`: 18 random digits."""
        self._id_bytes = self.request_id.encode("ascii")
        self._duration_bytes = str(self.duration_ms).encode("ascii")
        self._holes = re.compile(
            b"(" + re.escape(self._id_bytes) + b"|" + re.escape(self._duration_bytes) + b")"
        )

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
    ) -> CachedAnswer | None:
        """Keep the answer rendered with the sentinels; None when it cannot be kept safely
        (then the caller renders this request's answer itself)."""
        entry = self._entry(obs, verdict, recovery, resolved, template)
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
    ) -> CachedAnswer | None:
        body = None if template is None else template.body
        size = ENTRY_OVERHEAD_BYTES + len(obs.body or b"") + len(obs.path)
        if template is None or body is None:
            return CachedAnswer(verdict, recovery, resolved, template, (), (), size)
        if obs.body is not None and (
            self._id_bytes in obs.body or self._duration_bytes in obs.body
        ):
            return None
        if not _ascii_as_itself(_inserted_charset(obs, template)):
            return None
        parts = self._holes.split(body)
        pieces = tuple(parts[0::2])
        holes = tuple(p == self._id_bytes for p in parts[1::2])
        return CachedAnswer(verdict, recovery, resolved, template, pieces, holes, size + len(body))


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
