"""What another replica says a tools/list held is checked field by field before a book
takes it (gateway.feedback.fleet_events.hints_problem): `properties`, the arguments a tool
takes, as `required` is; absent from a replica of an older release."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.feedback.fleet_events import MAX_NAME, MAX_REQUIRED, hints_problem


@pytest.mark.parametrize(
    ("told", "problem"),
    [
        ({"replay_safe": False, "required": ["to"]}, None),
        ({"replay_safe": False, "required": [], "properties": ["to", "api_key"]}, None),
        ({"replay_safe": False, "required": [], "properties": "to"}, "bad_field"),
        ({"replay_safe": False, "required": [], "properties": [7]}, "bad_field"),
        ({"replay_safe": False, "required": [], "properties": ["x" * (MAX_NAME + 1)]}, "bad_field"),
        (
            {"replay_safe": False, "required": [], "properties": ["p"] * (MAX_REQUIRED + 1)},
            "bad_field",
        ),
    ],
)
def test_a_listings_properties_are_checked(told: dict[str, Any], problem: str | None) -> None:
    assert hints_problem("files", {"send": told}, ["files"]) == problem
