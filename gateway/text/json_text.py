"""JSON as its sender wrote it: read strictly, numbers kept as their text, written back strictly.

Python's json module reads `1e400` as inf and `NaN` as nan, and writes them back as `Infinity`
and `NaN`, which strict parsers (JSON.parse, Go's encoding/json, serde) refuse; it also rounds
`12345678901234567890.5` and refuses an integer of 5000 digits. What the gateway copies out of
an upstream's JSON (an envelope's `meta.original`) goes through here instead
(docs/security.md#redaction):

- `read` refuses `NaN` and `Infinity` (such a body is not JSON, and is copied as text), keeps
  every number as its text (`Number`) and every object's members in their order, duplicates
  included (`Members`);
- `write` writes such a value back, compact, numbers exactly as they were read;
- `dump` writes a whole document (an envelope) strictly: no `NaN`, a lone surrogate as its
  `\\u` escape, and each `Raw` value (JSON text already checked, such as the upstream's own
  body) placed as it is.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass
from typing import Any

JSON_SPACE = " \t\n\r"


class Number(str):
    """A JSON number, as its text."""

    __slots__ = ()


class Members(list[tuple[str, Any]]):
    """A JSON object: its members in their order, a repeated name kept as it came."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Raw:
    """A JSON value already written as strict JSON text, placed by `dump` as it is."""

    text: str


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_READER = json.JSONDecoder(
    parse_float=Number,
    parse_int=Number,
    parse_constant=_refuse_constant,
    object_pairs_hook=Members,
)
_STRING = json.encoder.encode_basestring  # the C string encoder, ensure_ascii off
_SURROGATE = re.compile("[\ud800-\udfff]")
_LITERALS = {None: "null", True: "true", False: "false"}


def read(text: str) -> Any:
    """The JSON document `text`: one value with only JSON whitespace around it; ValueError
    when it is anything else (`NaN`, `Infinity`, a trailing comma, nesting past the stack)."""
    try:
        return _READER.decode(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def as_raw(text: str) -> Raw | None:
    """`text` itself as a `Raw` value when it is one strict JSON document, else None."""
    try:
        read(text)
    except ValueError:
        return None
    return Raw(text.strip(JSON_SPACE))


def write(value: Any) -> str:
    """`value` (as `read` gives it, or plain JSON values) as compact strict JSON text."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value if isinstance(value, Number) else _STRING(value))
    elif isinstance(value, Members | dict):
        out.append("{")
        for index, (name, item) in enumerate(
            value if isinstance(value, Members) else value.items()
        ):
            out.append(f",{_STRING(name)}:" if index else f"{_STRING(name)}:")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif value is None or isinstance(value, bool):
        out.append(_LITERALS[value])
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not JSON")
        out.append(float.__repr__(value))
    elif isinstance(value, Raw):
        out.append(value.text)
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


def dump(value: Any) -> bytes:
    """A document (dicts, lists, strings, numbers, `Raw` values) as compact strict UTF-8 JSON.

    The json module's C encoder writes it; each `Raw` value goes in as a unique placeholder
    string, replaced by its text afterwards, so the upstream's body is never parsed into Python
    values and written again. ValueError for a float that is not finite.
    """
    raws: list[str] = []
    nonce = secrets.token_hex(8)

    def placeholder(item: Any) -> str:
        if not isinstance(item, Raw):
            raise TypeError(f"{type(item).__name__} is not a JSON value")
        raws.append(item.text)
        return f"\0{nonce}:{len(raws) - 1}"

    encoder = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=placeholder
    )
    text = encoder.encode(value)
    for index, raw in enumerate(raws):
        text = text.replace(_STRING(f"\0{nonce}:{index}"), raw, 1)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (`"\ud800"` is a legal escape) has no UTF-8 form; it can only
        # stand inside a string, where its escape means the same.
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


__all__ = ["JSON_SPACE", "Members", "Number", "Raw", "as_raw", "dump", "read", "write"]
