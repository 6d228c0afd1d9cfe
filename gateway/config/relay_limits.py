"""The MCP limits a relay needs before its config has loaded, read from the file's data.

`mendpoint stdio` relays its first messages while the config (pydantic, the rule packs) still
loads (docs/performance.md#mcp-start-up), but a line reader's limit is fixed when it is made
and the request table is sized when it is built. So the limits are read here from the parsed
YAML alone, with the bounds `models.McpSpec` validates them by (it takes them from here): a
plain integer in range is exactly what the model will keep. Anything the model may judge
otherwise (a string, a float, a bool, a value out of range, `mcp` not a mapping) is not
guessed at: `early_limits` answers None and the relay waits for the loaded config, so no
message is ever read with a bound the config does not set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Bound:
    """An integer setting's default and inclusive range."""

    default: int
    ge: int
    le: int

    def read(self, block: dict[Any, Any], key: str) -> int | None:
        """The value `key` sets in `block` (the default when absent), or None when only the
        model can say what it is."""
        if key not in block:
            return self.default
        value = block[key]
        if type(value) is not int or not self.ge <= value <= self.le:
            return None
        return value


MAX_MESSAGE_BYTES = Bound(default=16 << 20, ge=1024, le=1 << 30)
MAX_TRACKED_REQUESTS = Bound(default=1024, ge=1, le=1_000_000)
MAX_MESSAGE_VALUES = Bound(default=100_000, ge=100, le=10_000_000)
"""JSON values in one request (docs/security.md#mcp-bodies): about 10 MiB parsed at most."""
MAX_BATCH_MESSAGES = Bound(default=256, ge=1, le=100_000)
"""Messages in one JSON-RPC batch: far above what clients send, each message costs a line."""


class Limited(Protocol):
    """What holds the limits: the loaded config's `McpSpec`."""

    @property
    def max_message_bytes(self) -> int: ...

    @property
    def max_tracked_requests(self) -> int: ...

    @property
    def max_message_values(self) -> int: ...

    @property
    def max_batch_messages(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RelayLimits:
    """How long a line may be to be read whole, how many requests are tracked, and how
    many values and batch messages a request may hold to be parsed."""

    max_message_bytes: int = MAX_MESSAGE_BYTES.default
    max_tracked_requests: int = MAX_TRACKED_REQUESTS.default
    max_message_values: int = MAX_MESSAGE_VALUES.default
    max_batch_messages: int = MAX_BATCH_MESSAGES.default

    @classmethod
    def of(cls, spec: Limited) -> RelayLimits:
        return cls(
            spec.max_message_bytes,
            spec.max_tracked_requests,
            spec.max_message_values,
            spec.max_batch_messages,
        )


def early_limits(data: Any) -> RelayLimits | None:
    """The limits a config's top-level `data` sets, or None when the model must decide."""
    if not isinstance(data, dict):
        return None
    block = data.get("mcp", {})
    if not isinstance(block, dict):
        return None
    size = MAX_MESSAGE_BYTES.read(block, "max_message_bytes")
    tracked = MAX_TRACKED_REQUESTS.read(block, "max_tracked_requests")
    values = MAX_MESSAGE_VALUES.read(block, "max_message_values")
    batch = MAX_BATCH_MESSAGES.read(block, "max_batch_messages")
    if size is None or tracked is None or values is None or batch is None:
        return None
    return RelayLimits(size, tracked, values, batch)
