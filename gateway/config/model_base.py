"""What every model of the files users write shares: strict models, names, host:port.

Every model forbids unknown keys so a typo is an error, not a silently ignored setting, and is
frozen, so a loaded config cannot change under a request.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from gateway.config.jsonpath import parse_json_path

_CODE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")
_INTENT = re.compile(r"^[a-z][a-z0-9_.\-]{0,63}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CommandSpec(Strict):
    """A registry entry: the only place a `fix_command` string can come from."""

    run: str = Field(min_length=1, max_length=500)
    idempotent: bool = False
    destructive: bool = False
    description: str | None = None


def _json_path(value: str | None) -> str | None:
    if value is not None:
        parse_json_path(value)
    return value


def parse_host_port(value: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets) → (host, port); ValueError with a readable message."""
    match = re.match(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.\-]+):(\d{1,5})$", value)
    if not match or not 0 <= int(match.group(2)) <= 65535:
        raise ValueError(f"{value!r} must be HOST:PORT (e.g. 127.0.0.1:8080)")
    return match.group(1).strip("[]"), int(match.group(2))
