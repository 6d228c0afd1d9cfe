"""The unmatched-signature masks (gateway/feedback/signatures.py) give the same signature as running
every mask on every message: the digit and changed-whitespace shortcuts only skip work."""

from __future__ import annotations

import regex
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.feedback.signatures import MAX_TEXT, VARIABLE_MASKS, normalise

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
