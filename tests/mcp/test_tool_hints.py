"""What tools/list declares about repeating a call, remembered per route and tool, bounded
(gateway/mcp/tool_hints.py; docs/rules.md#tool-annotations)."""

from __future__ import annotations

import json
from typing import Any

from gateway.mcp.tool_hints import NAME_LIMIT, REQUIRED_LIMIT, ToolBook


def listing(*tools: tuple[str, dict[str, Any] | None]) -> dict[str, Any]:
    return {"tools": [{"name": n, "inputSchema": {}, "annotations": a} for n, a in tools]}


def test_read_only_or_idempotent_stated_true_is_replay_safe_and_nothing_else() -> None:
    book = ToolBook()
    book.learn(
        "r",
        listing(
            ("get", {"readOnlyHint": True}),
            ("put", {"readOnlyHint": False, "idempotentHint": True}),
            ("post", {"readOnlyHint": False}),
            ("delete", {"destructiveHint": True, "idempotentHint": "yes"}),
            ("plain", None),
        ),
    )
    safe = {name: book.is_replay_safe("r", name) for name in ("get", "put", "post", "delete")}
    assert safe == {"get": True, "put": True, "post": False, "delete": False}
    assert not book.is_replay_safe("r", "plain")
    assert not book.is_replay_safe("other-route", "get")
    assert not book.is_replay_safe("r", None)


def test_the_latest_listing_wins_and_garbage_is_ignored() -> None:
    book = ToolBook()
    book.learn("r", listing(("get", {"readOnlyHint": True})))
    book.learn("r", listing(("get", {"readOnlyHint": False})))
    assert not book.is_replay_safe("r", "get")
    junk: list[Any] = [None, [], {"tools": "x"}, {"tools": [1, {"name": 2}, {"annotations": {}}]}]
    for value in junk:
        book.learn("r", value)
    assert len(book) == 1


def test_the_book_is_bounded_oldest_listed_forgotten_first() -> None:
    book = ToolBook(capacity=3)
    book.learn("r", listing(*((f"t{i}", {"readOnlyHint": True}) for i in range(5))))
    assert len(book) == 3
    assert not book.is_replay_safe("r", "t0") and book.is_replay_safe("r", "t4")


def test_the_required_arguments_a_call_left_out() -> None:
    """inputSchema `required` as tools/list gives it; junk entries ignored, order kept."""
    book = ToolBook()
    schema = {"type": "object", "required": ["resourceType", "name", 7, "", "name"]}
    book.learn("r", {"tools": [{"name": "describe", "inputSchema": schema}, {"name": "free"}]})
    assert book.missing_arguments("r", "describe", frozenset()) == ("resourceType", "name")
    assert book.missing_arguments("r", "describe", frozenset({"resourceType"})) == ("name",)
    assert book.missing_arguments("r", "describe", frozenset({"resourceType", "name"})) == ()
    assert book.missing_arguments("r", "free", frozenset()) == ()
    assert book.missing_arguments("r", "unlisted", frozenset()) == ()
    assert book.missing_arguments("other-route", "describe", frozenset()) == ()
    assert book.missing_arguments("r", None, frozenset()) == ()


def test_a_schemas_required_list_is_bounded() -> None:
    many = [f"a{n}" for n in range(REQUIRED_LIMIT + 10)] + ["x" * (NAME_LIMIT + 1)]
    book = ToolBook()
    book.learn("r", {"tools": [{"name": "t", "inputSchema": {"required": many}}]})
    assert book.missing_arguments("r", "t", frozenset()) == tuple(many[:REQUIRED_LIMIT])
    book.learn("r", {"tools": [{"name": "t", "inputSchema": {"required": "name"}}]})
    assert book.missing_arguments("r", "t", frozenset()) == ()


def test_what_a_listing_changes_is_told_once_and_holds_in_another_book() -> None:
    """A fleet's replicas: one book learns from a listing and tells what changed, as JSON
    (docs/mcp.md#across-replicas); the other, told it, answers as the first does."""
    told: list[str] = []
    here, there = ToolBook(), ToolBook()
    here.on_learned = lambda route, tools: told.append(json.dumps([route, tools]))
    listing = {
        "tools": [
            {"name": "read", "annotations": {"readOnlyHint": True}},
            {
                "name": "send",
                "inputSchema": {
                    "type": "object",
                    "properties": {"to": {}, "body": {}, "api_key": {}},
                    "required": ["to", "body"],
                },
            },
        ]
    }
    here.learn("files", listing)
    here.learn("files", listing)  # the same again: nothing new to tell
    assert len(told) == 1
    route, tools = json.loads(told[0])
    there.received(route, tools)
    given = frozenset({"to"})
    for book in (here, there):
        assert book.is_replay_safe("files", "read") is True
        assert book.is_replay_safe("files", "send") is False
        assert book.missing_arguments("files", "send", given) == ("body",)
        facts = book.facts("files", "send")
        assert facts is not None and facts.properties == ("to", "body", "api_key")
    there.received("files", {"read": {"replay_safe": "yes", "required": "x"}, "odd": 7})
    assert there.is_replay_safe("files", "read") is False  # only a JSON true counts
    assert there.missing_arguments("files", "read", frozenset()) == ()


def test_a_replica_of_an_older_release_tells_no_properties() -> None:
    """Its event has no `properties`: the tool then takes no argument the book knows of."""
    book = ToolBook()
    book.received("r", {"send": {"replay_safe": False, "required": ["to"]}})
    facts = book.facts("r", "send")
    assert facts is not None and facts.properties == () and facts.required == ("to",)
