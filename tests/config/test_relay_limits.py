"""The MCP limits `mendpoint stdio` reads before its config has loaded agree with the model
wherever they answer (gateway/config/relay_limits.py, docs/performance.md#mcp-start-up)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config.models import McpSpec
from gateway.config.relay_limits import RelayLimits, early_limits

VALUES: list[Any] = [
    1024,
    2048,
    1 << 30,
    1023,
    (1 << 30) + 1,
    0,
    -5,
    "4096",
    "lots",
    4096.0,
    4096.5,
    True,
    None,
    [4096],
]


@pytest.mark.parametrize("key", ["max_message_bytes", "max_tracked_requests"])
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_an_early_answer_is_what_the_model_keeps(key: str, value: Any) -> None:
    """Where `early_limits` answers, the model accepts the same value unchanged; where the
    model would coerce or refuse it, `early_limits` leaves it to the model (None)."""
    found = early_limits({"mcp": {key: value}})
    try:
        spec = McpSpec.model_validate({key: value})
    except ValidationError:
        assert found is None, f"{value!r} is refused by the model but read early"
        return
    if found is not None:
        assert found == RelayLimits.of(spec)
        assert getattr(spec, key) == value and type(getattr(spec, key)) is type(value)
    else:
        assert type(value) is not int, f"{value!r} is a plain integer the model keeps"


def test_absent_keys_are_the_models_defaults() -> None:
    data: dict[str, Any]
    for data in ({}, {"mcp": {}}, {"mcp": {"compact": True}}, {"routes": []}):
        assert early_limits(data) == RelayLimits.of(McpSpec()) == RelayLimits()


@pytest.mark.parametrize("data", [[], "text", None, {"mcp": None}, {"mcp": [1]}], ids=repr)
def test_a_shape_only_the_model_can_judge_waits_for_it(data: Any) -> None:
    assert early_limits(data) is None
