"""Additive mode only inserts: the upstream's bytes survive and the result is strict JSON.

Generated JSON objects carry what re-serialising used to change (docs/transparency.md,
Additive mode): numbers beyond a double (`1e400`, `12345678901234567890.5`), trailing zeros,
duplicate names (an escaped `"\\u0065rror"` is `error` too), unicode escapes, nested `error`
objects and every kind of JSON whitespace. The result must be the original with at most two
runs of bytes inserted, parse with a parser that refuses NaN/Infinity and keeps duplicates,
and hold every original member, in order, as it was.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.enrich.envelope import additive
from gateway.failure import NO_RECOVERY, Category, Failure
from gateway.text.json_insert import scan_document

FAILURE = Failure(
    code="BAD_REQUEST",
    category=Category.VALIDATION_ERROR,
    message="Ungültige Eingabe ✓ 😀",
    retryable=False,
    retry_after_ms=None,
    fix_required="Fix it",
    fix_command=None,
    suggestion=None,
    recovery_intent=None,
    rule_id="http-400",
    from_default_rule=True,
)
ADDED = ("failure", "recovery", "recoverable", "recovery_available")

WS = st.sampled_from(["", " ", "\n", "\t", "\r\n  ", "  \n\t"])
NUMBERS = (
    st.sampled_from(
        ["1e400", "-1E+400", "1e-400", "12345678901234567890.5", "1.10", "0", "-0.0", "2.500E3"]
    )
    | st.integers().map(str)
    | st.just("9" * 400)
)
STRINGS = st.text(max_size=8).flatmap(
    lambda s: st.sampled_from([json.dumps(s), json.dumps(s, ensure_ascii=False)])
) | st.sampled_from(['"\\u00e9\\/"', '"\\ud83d\\ude00"', '"tab\\tq\\""', '"é😀"'])
NAMES = st.sampled_from(
    ['"a"', '"error"', '"\\u0065rror"', '"failure"', '"recovery"', '"x"', '"code"', '"ü"']
)
SCALARS = NUMBERS | STRINGS | st.sampled_from(["true", "false", "null"])


def _object(members: list[tuple[str, str, str, str]], inner: str) -> str:
    """`{ "name" : value , … }` with the given whitespace around each part."""
    text = ",".join(f"{before}{name}{after}:{value}" for before, name, after, value in members)
    return "{" + text + inner + "}"


def objects(values: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    member = st.tuples(WS, NAMES, WS, st.tuples(WS, values, WS).map("".join))
    return st.builds(_object, st.lists(member, max_size=6), WS)


VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        objects(inner)
        | st.lists(st.tuples(WS, inner, WS).map("".join), max_size=4).map(
            lambda xs: "[" + ",".join(xs) + "]"
        )
    ),
    max_leaves=12,
)
DOCUMENTS = st.tuples(WS, objects(VALUES), WS).map("".join)


class Pairs(list[tuple[str, Any]]):
    """An object's members in order, duplicates kept (an array stays a plain list)."""


def _strict_pairs(raw: str | bytes) -> Pairs:
    def refuse(name: str) -> Any:
        raise ValueError(name)

    pairs: Pairs = json.loads(
        raw, parse_constant=refuse, parse_float=str, parse_int=str, object_pairs_hook=Pairs
    )
    return pairs


def _without_two_runs(original: bytes, output: bytes) -> bool:
    """`output` is `original` with at most two runs of bytes inserted."""
    first = _common_prefix(original, output)
    for cut in range(first, len(output) + 1):
        rest, left = output[cut:], original[first:]
        second = _common_prefix(left, rest)
        tail = len(left) - second
        if len(rest) - tail >= second and rest[len(rest) - tail :] == left[second:]:
            return True
    return False


def _common_prefix(a: bytes, b: bytes) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS, st.sampled_from(["utf-8", "iso-8859-1", "utf-16"]))
def test_additive_only_inserts_and_gives_strict_json(document: str, charset: str) -> None:
    try:
        original = document.encode(charset)
    except UnicodeEncodeError:
        original = document.encode("utf-8")
        charset = "utf-8"
    content_type = f"application/json; charset={charset}"  # utf-16: a BOM, then LE
    spliced = additive(original, content_type, FAILURE, NO_RECOVERY, "req-1")
    assert spliced is not None
    assert _without_two_runs(original, spliced)
    before, after = _strict_pairs(original.decode(charset)), _strict_pairs(spliced.decode(charset))
    names = {name for name, _ in before}
    assert [name for name, _ in after[len(before) :]] == [
        n for n in ("error", *ADDED) if n not in names
    ]
    errors = [i for i, (name, _) in enumerate(before) if name == "error"]
    if errors and isinstance(before[errors[-1]][1], Pairs):  # its members kept, fields added
        kept, extended = before[errors[-1]][1], after[errors[-1]][1]
        assert extended[: len(kept)] == kept
        assert {n for n, _ in extended} >= {"code", "message", "request_id"}
        before[errors[-1]] = after[errors[-1]]
    assert after[: len(before)] == before


def test_values_a_parser_would_change_survive_as_written() -> None:
    body = b'{"big":1e400,"long":12345678901234567890.5,"zeros":1.10,"k":1,"k":2}'
    spliced = additive(body, "application/json", FAILURE, NO_RECOVERY, "req-1")
    assert spliced is not None
    assert spliced.startswith(body[:-1] + b',"error":{"code":"BAD_REQUEST"')
    pairs = _strict_pairs(spliced)
    assert pairs[:5] == [
        ("big", "1e400"),
        ("long", "12345678901234567890.5"),
        ("zeros", "1.10"),
        ("k", "1"),
        ("k", "2"),
    ]


def test_the_last_of_duplicate_error_objects_gets_the_fields() -> None:
    body = b'{"error":{"a":1},"error":{ "code" : "E1" }\n}'
    spliced = additive(body, "application/json", FAILURE, NO_RECOVERY, "req-1")
    assert spliced is not None
    assert spliced.startswith(b'{"error":{"a":1},"error":{ "code" : "E1","message":')
    assert spliced.endswith(b'"recovery_available":false\n}')


def test_bodies_that_are_not_one_strict_object_are_not_touched() -> None:
    for body in (b'{"a":NaN}', b'{"a":Infinity}', b'{"a":1}{}', b'{"a":1,}', b"[1]", b'{"a"'):
        assert scan_document(body.decode()) is None
        assert additive(body, "application/json", FAILURE, NO_RECOVERY, "r") is None
