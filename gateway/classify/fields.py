"""`error.fields`: the fields an upstream named as at fault, and a message that names them.

A rule's `fields:` says where a body names fields (FastAPI's `detail[].loc`/`msg`, DRF's
`{field: [messages]}`, AIP-193 field violations, Stripe's `param`); a failure carries them
only when the body actually names some. Everything is bounded: at most `MAX_FIELDS`
entries, each name and message cut, and the summary message cut to `MESSAGE_LIMIT`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.config.jsonpath import JsonPath, parse_json_path
from gateway.config.rule_model import FieldsSpec
from gateway.failure import FieldError
from gateway.text.safe_text import clean_text

MAX_FIELDS = 20
FIELD_LIMIT = 200
FIELD_MESSAGE_LIMIT = 300
SUMMARY_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class FieldSource:
    """One compiled `fields:` spec."""

    each: JsonPath
    field: JsonPath | None
    message: JsonPath | None

    @classmethod
    def compile(cls, spec: FieldsSpec) -> FieldSource:
        return cls(
            each=parse_json_path(spec.each),
            field=parse_json_path(spec.field) if spec.field else None,
            message=parse_json_path(spec.message) if spec.message else None,
        )

    def extract(self, body: Any) -> tuple[tuple[FieldError, ...], int]:
        """The named fields (at most `MAX_FIELDS`) and how many the body names in all."""
        found: list[FieldError] = []
        seen: set[tuple[str, str]] = set()
        total = 0
        for item, keys in self.each.find_keyed(body):
            name = _name(self.field.get(item)) if self.field else ".".join(keys)
            message = _message(self.message.get(item) if self.message else item)
            if not name or not message:
                continue
            entry = (clean_text(name, FIELD_LIMIT), clean_text(message, FIELD_MESSAGE_LIMIT))
            if not entry[0] or not entry[1] or entry in seen:
                continue
            seen.add(entry)
            total += 1
            if len(found) < MAX_FIELDS:
                found.append(FieldError(*entry))
        return tuple(found), total


def extract_fields(sources: Sequence[FieldSource], body: Any) -> tuple[tuple[FieldError, ...], int]:
    """The first source that finds any fields wins; `((), 0)` when none does."""
    if body is None:
        return (), 0
    for source in sources:
        fields, total = source.extract(body)
        if fields:
            return fields, total
    return (), 0


def summary(fields: Sequence[FieldError], total: int) -> str:
    """`"body.quantity: Field required; body.name: …"`, naming as many as fit the bound."""
    parts: list[str] = []
    length = 0
    for entry in fields:
        part = f"{entry.field}: {entry.message}"
        if parts and length + len(part) + 2 > SUMMARY_LIMIT - 40:
            break
        parts.append(part)
        length += len(part) + 2
    text = "; ".join(parts)
    if total > len(parts):
        text += f"; and {total - len(parts)} more"
    return clean_text(text, SUMMARY_LIMIT)


def _name(value: Any) -> str | None:
    """A field name: a string, or a location list such as FastAPI's `["body", "items", 0]`."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list) and value:
        parts = [str(p) for p in value if isinstance(p, str | int) and not isinstance(p, bool)]
        return ".".join(parts) if len(parts) == len(value) else None
    return None


def _message(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # DRF's `{"name": ["a", "b"]}` under `each: "*"`
        texts = [v for v in value if isinstance(v, str) and v.strip()]
        return "; ".join(texts) if texts else None
    return None


__all__ = ["MAX_FIELDS", "FieldSource", "extract_fields", "summary"]
