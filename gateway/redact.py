"""Redaction: secrets cut out of text the gateway copies somewhere new (docs/security.md).

A debug page or an echoing API can put a bearer token, a `password=` pair, an AWS key or a
private key into an error body. Whatever the gateway copies out of a body passes `Redactor`
first, so a secret travels no further than it already had: captured exchanges for
`mendpoint suggest`, a failure's `message` and `fields` (`Redactor.failure`, in the one
enrichment step, so every shape, MCP's included, gets them clean) and an envelope's
`meta.original` (`Redactor.body`). The upstream's own bytes and members are never touched.
The shipped patterns are on unless `redaction.builtin: false`; `redaction.patterns` adds more.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import regex

from gateway.config.models import RedactionSpec
from gateway.failure import Failure, FieldError

MASK = "[REDACTED]"
TIMEOUT_S = 0.05

# (pattern, replacement): groups named `keep` stay, everything else matched is masked.
BUILTIN = (
    # PEM private keys, whole.
    (r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",),
    # Authorization schemes with their credentials. A credential has a digit or a change of
    # case inside it; an English word after "token" ("CSRF token missing.", "the security
    # token included in …") has neither, and the messages that say so must stay whole.
    (
        r"(?i)(?P<keep>\b(?:bearer|basic|token|apikey)\s+)"
        r"(?-i:(?=[A-Za-z0-9._~+/=\-]*(?:[0-9]|[a-z][A-Z]))[A-Za-z0-9._~+/=\-]{8,})",
    ),
    # JSON Web Tokens anywhere.
    (r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}",),
    # AWS access key ids.
    (r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b",),
    # name=value, name: value and "name": "value" pairs whose name says secret.
    (
        r"(?i)(?P<keep>\b[\w\-]*(?:password|passwd|pwd|secret|token|api[_\-]?key|"
        r"access[_\-]?key|private[_\-]?key|credential|session[_\-]?id)[\w\-]*"
        r"[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;<>]{1,}",
    ),
)


# Every shipped pattern needs one of these (lower-case) words: a text without any, as most
# messages are, skips them all for a few substring tests. The enrichment step redacts every
# failure's message and fields, so this keeps that step cheap (58 -> 5 us for a message and
# two fields, where a case-insensitive regex alternation alone costs 3-6 us per string).
BUILTIN_HINTS = (
    "key",  # PRIVATE KEY, apikey, api_key, access-key, private_key
    "bearer",
    "basic",
    "token",
    "eyj",
    "akia",
    "asia",
    "agpa",
    "aida",
    "aroa",
    "passw",
    "pwd",
    "secret",
    "credential",
    "session",
)


@dataclass(frozen=True, slots=True)
class Redactor:
    builtin: tuple[regex.Pattern[str], ...]
    custom: tuple[regex.Pattern[str], ...] = ()
    """`redaction.patterns`: no hint is known for them, so they always run."""

    @classmethod
    def build(cls, spec: RedactionSpec) -> Redactor:
        builtin = tuple(regex.compile(p) for (p,) in BUILTIN) if spec.builtin else ()
        return cls(builtin, tuple(regex.compile(p) for p in spec.patterns))

    def text(self, value: str) -> str:
        """`value` with every secret masked; a pattern that times out masks the whole text."""
        lowered = value.lower()
        hinted = bool(self.builtin) and any(hint in lowered for hint in BUILTIN_HINTS)
        for pattern in (*self.builtin, *self.custom) if hinted else self.custom:
            try:
                value = pattern.sub(_mask, value, timeout=TIMEOUT_S)
            except TimeoutError:
                return MASK
        return value

    def failure(self, failure: Failure) -> Failure:
        """`failure` with its message and fields redacted (the same object when clean)."""
        message = self.text(failure.message)
        fields = tuple(FieldError(self.text(f.field), self.text(f.message)) for f in failure.fields)
        if message == failure.message and fields == failure.fields:
            return failure
        return dataclasses.replace(failure, message=message, fields=fields)

    def body(self, text: str, parsed: object) -> object:
        """A body as `meta.original` carries it: `parsed` (its JSON, or None) when nothing
        was masked; else the redacted text, parsed again when it still is JSON.

        The text is redacted whole, not value by value, so a `"password": "…"` pair is
        caught by its name."""
        clean = self.text(text)
        if clean == text:
            return text if parsed is None else parsed
        if parsed is None:
            return clean
        try:
            reparsed: object = json.loads(clean)
        except ValueError:
            return clean
        return reparsed

    def value(self, data: object) -> object:
        """A parsed JSON value with every string redacted (keys kept)."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, list):
            return [self.value(item) for item in data]
        if isinstance(data, dict):
            return {key: self.value(item) for key, item in data.items()}
        return data


def _mask(match: regex.Match[str]) -> str:
    keep = match.groupdict().get("keep")
    return (keep or "") + MASK
