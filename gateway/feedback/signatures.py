"""The unmatched-errors report: which failures only a shipped default rule classified.

Each such failure is reduced to a signature — route, status and the upstream's message with
numbers, ids and quoted values masked — and kept in a bounded table (the space-saving top-N
algorithm: when full, the entry counted least since the last reset gives its place, its count
carried over). `mendpoint gaps` prints the top of it, so a team knows which rule to write next.

Counts answer for a window (docs/operations.md#gaps): each signature counts its failures in
`BUCKET_S` buckets, the last `SLOTS` of them (`MAX_WINDOW_S`, three hours), in a ring of
4-byte counters: 8.6 KiB a signature, 1.7 MiB for a full table of 200, allocated when the
signature is first seen. A window is summed from whole buckets, so it is as precise as one
bucket. Each signature also keeps one sample, redacted as a capture is and cut at
`SAMPLE_BODY_BYTES`: the latest, taken at most once every `SAMPLE_EVERY_S`, so a burst of one
failure redacts one body a minute, not one a failure.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import regex

from gateway.classify.redact import Redactor
from gateway.failure import Mode
from gateway.observers import Classified, FailureNotes

MAX_TEXT = 160
# The variable parts of a message (quoted values, ids, emails, numbers) and what each becomes;
# `mendpoint suggest` turns the same parts into captures.
VARIABLE_MASKS = (
    (regex.compile(r"\"[^\"]*\"|'[^']*'|`[^`]*`"), "'…'"),
    (
        regex.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
            r"[0-9a-fA-F]{12}\b"
        ),
        "<id>",
    ),
    (regex.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b"), "<email>"),
    (regex.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "<id>"),
    (regex.compile(r"\d+(?:[.:,-]\d+)*"), "#"),
)
# Whitespace runs become one space. Only runs that change are matched (two or more, or one
# that is not a space): replacing every single space by a space was a third of the cost.
_SPACES = regex.compile(r"\s{2,}|[^\S ]")
# The id and number masks (the last two) match only text with a digit; most messages, once
# their quoted values are masked, have none (docs/performance.md).
_DIGIT = regex.compile(r"\d")
_ALWAYS, _DIGITS = VARIABLE_MASKS[:3], VARIABLE_MASKS[3:]


@dataclass(frozen=True, slots=True)
class Signature:
    route: str
    status: str
    text: str


def normalise(message: str) -> str:
    """The message with its variable parts masked, so one kind of error is one signature."""
    text = message[: MAX_TEXT * 4]
    for pattern, replacement in _ALWAYS:
        text = pattern.sub(replacement, text)
    if _DIGIT.search(text) is not None:
        for pattern, replacement in _DIGITS:
            text = pattern.sub(replacement, text)
    text = str(_SPACES.sub(" ", text)).strip()
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


BUCKET_S = 5
SLOTS = 2160
MAX_WINDOW_S = BUCKET_S * SLOTS
"""The longest window a count answers for: three hours."""
DEFAULT_WINDOW_S = 900
SAMPLE_BODY_BYTES = 4096
SAMPLE_EVERY_S = 60.0
MAX_SAMPLE_PATH = 16 << 10
"""A sample's path, message or header at most (characters): what a request head can hold."""
SAMPLE_HEADERS = ("Content-Type", "Retry-After", "WWW-Authenticate")
"""The response headers a sample keeps: those a capture keeps by default."""


@dataclass(frozen=True, slots=True)
class GapSample:
    """One failure of a signature, as a capture records it: redacted, its body cut at
    `SAMPLE_BODY_BYTES`. What `covered_by` is decided on and `mendpoint suggest` drafts from."""

    method: str
    path: str
    status: int | None
    transport: str | None
    headers: tuple[tuple[str, str], ...]
    body: str
    truncated: bool
    message: str

    def record(self) -> dict[str, Any]:
        """The sample as /gaps answers it (and the fleet store keeps it)."""
        return {
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "transport": self.transport,
            "headers": dict(self.headers),
            "body": self.body,
            "truncated": self.truncated,
            "message": self.message,
        }

    @classmethod
    def from_record(cls, data: object) -> GapSample | None:
        """A sample read back from JSON (a worker's, the store's); None when it is not one."""
        if not isinstance(data, dict):
            return None
        status, transport, headers = data.get("status"), data.get("transport"), data.get("headers")
        texts = [data.get(key) for key in ("method", "path", "body", "message")]
        if (
            not all(isinstance(text, str) for text in texts)
            or not (status is None or (isinstance(status, int) and not isinstance(status, bool)))
            or not (transport is None or isinstance(transport, str))
            or not isinstance(headers, dict)
            or not all(isinstance(v, str) for v in headers.values())
        ):
            return None
        method, path, body, message = (str(text) for text in texts)
        if (  # no larger than a book makes one: a row from the store is checked as an event is
            len(method) > 32
            or len(path) > MAX_SAMPLE_PATH
            or len(body) > SAMPLE_BODY_BYTES
            or len(message) > MAX_SAMPLE_PATH
            or len(headers) > len(SAMPLE_HEADERS)
            or any(len(k) + len(v) > MAX_SAMPLE_PATH for k, v in headers.items())
            or (transport is not None and len(transport) > 32)
        ):
            return None
        pairs = tuple((str(k), v) for k, v in headers.items())
        truncated = bool(data.get("truncated", False))
        return cls(method, path, status, transport, pairs, body, truncated, message)


def sample_of(event: Classified, redactor: Redactor) -> GapSample | None:
    """`event` as a signature's sample (an HTTP status or a transport fault; an MCP failure
    keeps none), redacted as `gateway.feedback.capture` redacts a capture."""
    if event.status is None and event.transport is None:
        return None
    body, cut = redactor.copy(event.body, SAMPLE_BODY_BYTES)
    wanted = {name.lower() for name in SAMPLE_HEADERS}
    cap = MAX_SAMPLE_PATH // 2  # header name and value together within MAX_SAMPLE_PATH
    headers = tuple(
        (k[:cap], redactor.text(v)[:cap]) for k, v in event.headers.items() if k.lower() in wanted
    )
    return GapSample(
        method=event.method[:32],
        path=redactor.text(event.path)[:MAX_SAMPLE_PATH],
        status=event.status,
        transport=event.transport.value if event.transport is not None else None,
        headers=headers,
        body=body,
        truncated=cut,
        message=event.failure.message[:MAX_SAMPLE_PATH],
    )


@dataclass(frozen=True, slots=True)
class Gap:
    """A signature as /gaps lists it: its failures inside the window asked, and a sample."""

    signature: Signature
    count: int
    sample: GapSample | None = None


def rank_key(gap: Gap) -> tuple[int, str, str, str]:
    """Most failures first; ties in the order of route, status and text."""
    return (-gap.count, gap.signature.route, gap.signature.status, gap.signature.text)


def ranked(gaps: list[Gap], limit: int) -> list[Gap]:
    """The top `limit` of `gaps` (`rank_key`)."""
    gaps.sort(key=rank_key)
    return gaps[:limit]


def bucket_of(when: float) -> int:
    """The bucket a Unix time falls in (the fleet's replicas agree on it)."""
    return int(when // BUCKET_S)


def window_buckets(window_s: float) -> int:
    """How many buckets, the current one included, a window of `window_s` covers."""
    return max(1, min(SLOTS, math.ceil(window_s / BUCKET_S)))


def _ring(first: int, count: int) -> list[tuple[int, int]]:
    """The slices of the ring holding `count` buckets from bucket `first` on."""
    start = first % SLOTS
    if start + count <= SLOTS:
        return [(start, start + count)]
    return [(start, SLOTS), (0, start + count - SLOTS)]


class _Tally:
    """One signature's failures: since the last reset (space-saving), and per bucket. Every
    slot holds the bucket of its index among the last `SLOTS` up to `swept`; older ones are
    cleared as `swept` moves on, a slice at a time."""

    __slots__ = ("counts", "sample", "sampled_at", "swept", "total")

    def __init__(self, total: int, bucket: int) -> None:
        self.total = total
        self.counts = array("I", bytes(4 * SLOTS))
        self.swept = bucket
        self.sample: GapSample | None = None
        self.sampled_at = -math.inf

    def add(self, bucket: int) -> None:
        self._sweep(bucket)
        if bucket > self.swept - SLOTS:  # a clock set back past the ring counts nowhere
            self.counts[bucket % SLOTS] += 1

    def within(self, bucket: int, buckets: int) -> int:
        """Failures in the `buckets` buckets up to `bucket`."""
        self._sweep(bucket)
        return sum(sum(self.counts[a:b]) for a, b in _ring(bucket - buckets + 1, buckets))

    def _sweep(self, bucket: int) -> None:
        if bucket <= self.swept:
            return
        for a, b in _ring(self.swept + 1, min(bucket - self.swept, SLOTS)):
            self.counts[a:b] = array("I", bytes(4 * (b - a)))
        self.swept = bucket


class SignatureBook:
    """Approximate top-N signatures in bounded memory, counted per window."""

    def __init__(self, capacity: int = 200, clock: Callable[[], float] = time.time) -> None:
        self.capacity = capacity
        self.clock = clock
        """Unix seconds: buckets are wall-clock, so every replica of a fleet agrees on them."""
        self._tallies: dict[Signature, _Tally] = {}
        self.shared: Callable[[Signature, GapSample | None, float], None] | None = None
        """Told of every signature, of a sample when one is taken, and of the time (`clock`),
        when a fleet store counts them too (gateway.feedback.shared)."""

    def record(
        self,
        route: str,
        status: str,
        message: str,
        sample: Callable[[], GapSample | None] | None = None,
    ) -> None:
        """One failure of a signature; `sample` makes its sample, called only when one is due."""
        signature = Signature(route, status, normalise(message))
        now = self.clock()
        bucket = bucket_of(now)
        tally = self._tallies.get(signature)
        if tally is not None:
            tally.total += 1
        elif len(self._tallies) < self.capacity:
            tally = self._tallies[signature] = _Tally(1, bucket)
        else:
            smallest = min(self._tallies, key=lambda s: self._tallies[s].total)
            floor = self._tallies.pop(smallest).total
            tally = self._tallies[signature] = _Tally(floor + 1, bucket)
        tally.add(bucket)
        taken = None
        if sample is not None and now - tally.sampled_at >= SAMPLE_EVERY_S:
            taken = sample()
            if taken is not None:
                tally.sample, tally.sampled_at = taken, now
        if self.shared is not None:
            self.shared(signature, taken, now)

    def top(self, limit: int = 20, window_s: float = DEFAULT_WINDOW_S) -> list[Gap]:
        """The signatures with failures inside the last `window_s` seconds, most first."""
        bucket, buckets = bucket_of(self.clock()), window_buckets(window_s)
        found = []
        for signature, tally in self._tallies.items():
            count = tally.within(bucket, buckets)
            if count > 0:
                found.append(Gap(signature, count, tally.sample))
        return ranked(found, limit)

    def reset(self) -> None:
        """Start the counts afresh (`POST /gaps/reset`)."""
        self._tallies.clear()

    def __len__(self) -> int:
        return len(self._tallies)


class SignatureObserver:
    """The unmatched-errors report, as a declared observer of the failure path
    (gateway/observers.py): a failure only a shipped default named becomes a signature, its
    sample redacted by the config's `redactor`."""

    def __init__(self, book: SignatureBook, redactor: Redactor) -> None:
        self.book = book
        self.redactor = redactor

    def classified(self, event: Classified) -> None:
        if event.is_default:
            redactor = self.redactor
            self.book.record(
                event.route, event.kind, event.failure.message, lambda: sample_of(event, redactor)
            )

    def upgraded(self, route: str, mode: Mode) -> None:
        pass

    def fell_back(self, route: str, reason: str, notes: FailureNotes | None) -> None:
        pass
