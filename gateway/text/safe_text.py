"""Untrusted text made safe to show: every string the upstream wrote passes through here."""

from __future__ import annotations

import regex

_CONTROL = regex.compile(r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]+")
_SPACES = regex.compile(r"\s+")


def clean_text(value: str, limit: int) -> str:
    """Control/format characters out, spaces folded, cut to `limit` characters with `…`."""
    if value.isprintable() and "  " not in value:
        # Printable means no Cc/Cf/Zl/Zp and no whitespace but the ASCII space, so the two
        # substitutions below would change nothing: skip them (most text, on every error).
        text = value.strip()
    else:
        text = _SPACES.sub(" ", _CONTROL.sub(" ", value)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["clean_text"]
