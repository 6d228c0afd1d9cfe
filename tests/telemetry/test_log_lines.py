"""The JSON log line (gateway.telemetry.log_lines.json_line) is written by orjson and reads as
json.dumps wrote it: byte for byte for the values an access line carries, and as the same
JSON for anything else, falling back to json where orjson refuses a value."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.telemetry.log_lines import json_line

HEAD = ("2026-12-03T10:50:42.319Z", "INFO", "mendpoint.access", "request")


def as_json_wrote_it(fields: dict[str, Any]) -> str:
    payload = {"ts": HEAD[0], "level": "info", "logger": HEAD[2], "msg": HEAD[3], **fields}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)


text = st.text(st.characters(exclude_categories=["Cs"]))  # a lone surrogate: below
access_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 10**12).map(lambda n: n / 100),  # durations: rounded to 2 places
    text,
)


@given(st.dictionaries(text, access_values, max_size=20))
def test_an_access_line_is_byte_for_byte_what_json_wrote(fields: dict[str, Any]) -> None:
    assert json_line(*HEAD, fields) == as_json_wrote_it(fields)


@given(st.dictionaries(text, st.one_of(st.floats(allow_nan=False, allow_infinity=False), text)))
def test_any_finite_float_reads_back_the_same(fields: dict[str, Any]) -> None:
    assert json.loads(json_line(*HEAD, fields)) == json.loads(as_json_wrote_it(fields))


def test_what_orjson_refuses_is_written_by_json_as_before() -> None:
    fields = {"path": "/caf\udce9", "huge": 2**70}  # a surrogate-escaped byte, a 71-bit int
    assert json_line(*HEAD, fields) == as_json_wrote_it(fields)


def test_a_datetime_or_a_dataclass_is_its_str_as_json_wrote_it() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    fields = {"at": datetime.datetime(2026, 12, 3, 10, 50), "point": Point(1), "set": {1}}
    assert json_line(*HEAD, fields) == as_json_wrote_it(fields)
