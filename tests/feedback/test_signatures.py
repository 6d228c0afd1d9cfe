"""The unmatched-signature masks (gateway/feedback/signatures.py) give the same signature as running
every mask on every message: the digit and changed-whitespace shortcuts only skip work. The
book counts each signature per window, keeps one redacted sample, and stays bounded."""

from __future__ import annotations

import json

import regex
from hypothesis import example, given
from hypothesis import strategies as st
from multidict import CIMultiDict

from gateway.classify.redact import Redactor
from gateway.config.models import RedactionSpec
from gateway.failure import Category, Failure, Mode
from gateway.feedback.signatures import (
    BUCKET_S,
    DEFAULT_WINDOW_S,
    MAX_TEXT,
    MAX_WINDOW_S,
    SAMPLE_BODY_BYTES,
    SAMPLE_EVERY_S,
    SLOTS,
    VARIABLE_MASKS,
    GapSample,
    SignatureBook,
    normalise,
    sample_of,
)
from gateway.observers import Classified

EVERY_MASK = (*VARIABLE_MASKS, (regex.compile(r"\s+"), " "))


def reference(message: str) -> str:
    """Each mask in turn on the whole text, as the signature is defined."""
    text = message[: MAX_TEXT * 4]
    for pattern, replacement in EVERY_MASK:
        text = pattern.sub(replacement, text)
    text = text.strip()
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


PIECES = st.sampled_from(
    [
        " ",
        "  ",
        "\t",
        "\n",
        "\u00a0",
        "\u2003",
        "'",
        '"',
        "`",
        "-",
        "@",
        ".",
        "a",
        "F",
        "7",
        "\u0663",
        "deadbeef",
        "12:30",
        "1.5",
        "x@y.io",
        "ENOENT",
        "open '/srv/x-1.txt'",
        "123e4567-e89b-12d3-a456-426614174000",
    ]
)


@given(st.lists(PIECES | st.text(max_size=3), max_size=12).map("".join))
@example("ENOENT: no such file or directory, open '/srv/notes/missing-17.txt'")
@example("id deadbeef01 at  line\t\u0663 \u00a0end ")
def test_the_signature_is_every_mask_applied(message: str) -> None:
    assert normalise(message) == reference(message)


class Clock:
    """Unix seconds, moved by the test."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counts(book: SignatureBook, window_s: float) -> dict[str, int]:
    return {gap.signature.status: gap.count for gap in book.top(50, window_s)}


def test_a_window_counts_only_the_failures_inside_it() -> None:
    clock = Clock()
    book = SignatureBook(clock=clock)
    for _ in range(3):
        book.record("api", "404", "no item 7")
    clock.now += 600
    book.record("api", "404", "no item 8")
    book.record("api", "409", "taken")
    clock.now += 100
    assert counts(book, 300) == {"404": 1, "409": 1}
    assert counts(book, DEFAULT_WINDOW_S) == {"404": 4, "409": 1}
    clock.now += 1000  # all of it more than 900 s ago: no gap in the default window
    assert book.top(50) == []
    assert counts(book, MAX_WINDOW_S) == {"404": 4, "409": 1}
    clock.now += MAX_WINDOW_S  # past the longest window: nothing left to count
    assert counts(book, MAX_WINDOW_S) == {}
    book.record("api", "404", "no item 9")  # the ring starts again where it is
    assert counts(book, BUCKET_S) == {"404": 1}


def test_a_window_is_as_precise_as_one_bucket() -> None:
    clock = Clock(BUCKET_S * 1000.0)  # the start of a bucket
    book = SignatureBook(clock=clock)
    book.record("api", "404", "gone")
    clock.now += BUCKET_S - 0.01
    assert counts(book, 1) == {"404": 1}  # the same bucket
    clock.now += 0.02
    assert counts(book, 1) == {}
    assert counts(book, BUCKET_S + 1) == {"404": 1}


def test_reset_starts_afresh_and_the_table_stays_bounded() -> None:
    book = SignatureBook(capacity=2, clock=Clock())
    for message in ("a", "a", "a", "b", "c"):
        book.record("api", "400", message)
    # Space-saving: "c" took the place of "b", the least counted, with its count carried.
    assert [(g.signature.text, g.count) for g in book.top()] == [("a", 3), ("c", 1)]
    assert len(book) == 2
    book.reset()
    assert len(book) == 0 and book.top() == []


def test_one_sample_a_minute_the_latest() -> None:
    clock = Clock()
    book = SignatureBook(clock=clock)
    taken: list[int] = []

    def sample(n: int) -> GapSample:
        taken.append(n)
        return GapSample("GET", f"/items/{n}", 404, None, (), f"no item {n}", False, "x")

    for n in range(1, 5):
        book.record("api", "404", "no item", lambda n=n: sample(n))  # type: ignore[misc]
    clock.now += SAMPLE_EVERY_S
    book.record("api", "404", "no item", lambda: sample(9))
    assert taken == [1, 9]  # a burst redacts one body, not one a failure
    (gap,) = book.top()
    assert gap.sample is not None and gap.sample.path == "/items/9"


def test_a_sample_is_redacted_and_cut_as_a_capture_is() -> None:
    secret = "hunter2hunter2"
    body = json.dumps({"message": f"login failed for password={secret}", "pad": "x" * 9000})
    failure = Failure(
        "UNAUTHORIZED", Category.AUTH_REQUIRED, "login failed", False, None, None, None, None,
        None, "http-401", True,
    )  # fmt: skip
    event = Classified(
        route="api",
        mode=Mode.HEADERS,
        request_id="r1",
        method="POST",
        path="/login",
        status=401,
        transport=None,
        refusal=None,
        headers=CIMultiDict({"Content-Type": "application/json", "Set-Cookie": "s=1"}),
        body=body.encode(),
        tool=None,
        operation="POST /login",
        failure=failure,
        rule="http-401",
        is_default=True,
        notes=None,
    )
    sample = sample_of(event, Redactor.build(RedactionSpec()))
    assert sample is not None
    assert secret not in sample.body and "[REDACTED]" in sample.body
    assert sample.truncated and len(sample.body.encode()) <= SAMPLE_BODY_BYTES
    assert sample.headers == (("Content-Type", "application/json"),)  # Set-Cookie not kept
    assert GapSample.from_record(json.loads(json.dumps(sample.record()))) == sample


def test_a_signatures_counters_are_a_fixed_ring() -> None:
    """The memory bound docs/operations.md#gaps states: 8,640 bytes of counters a signature."""
    book = SignatureBook(clock=Clock())
    book.record("api", "404", "gone")
    tally = next(iter(book._tallies.values()))
    assert tally.counts.itemsize * len(tally.counts) == 4 * SLOTS == 8640
