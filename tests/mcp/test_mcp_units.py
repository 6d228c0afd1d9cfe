"""The MCP building blocks on their own: request tables, rewrites, SSE events, Origin checks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from multidict import CIMultiDict
from pydantic import ValidationError

from gateway.classify import Observation, ObservationKind
from gateway.config.route_model import RouteSpec
from gateway.enrich.step import FailureContext
from gateway.exchange.routes import Route
from gateway.failure import Category, Failure, Mode
from gateway.mcp import oauth
from gateway.mcp.jsonrpc import (
    Pending,
    RequestTable,
    SessionTables,
    may_need_rewrite,
    request_key,
    requests_in,
)
from gateway.mcp.origin import refusal
from gateway.mcp.rewrite import (
    FAILURE_META_KEY,
    ORIGINAL_DATA_KEY,
    TOOL_FAILURE_KEY,
    guided_tools_list,
    is_tool_error,
    tool_error_text,
    tool_failure,
    upgraded_error,
    upgraded_tool_result,
)
from gateway.mcp.sse import relay_events
from gateway.mcp.upgrade import tool_error_observation
from gateway.resolve.service import Situation

PAYLOAD = {"error": {"code": "X"}, "failure": {"category": "NOT_FOUND"}}


def failure(category: Category, retryable: bool = False, fix: str | None = None) -> Failure:
    return Failure(
        code="SOME_CODE",
        category=category,
        message="m",
        retryable=retryable,
        retry_after_ms=1500 if retryable else None,
        fix_required=fix,
        fix_command=None,
        suggestion=None,
        recovery_intent=None,
        rule_id="r",
        from_default_rule=True,
    )


def test_request_table_is_bounded_and_evicts_oldest() -> None:
    table = RequestTable(3)
    for n in range(10):
        table.add((False, n), Pending("tools/call", f"t{n}"))
    assert len(table) == 3
    assert table.pop((False, 0)) is None
    assert table.pop((False, 9)) == Pending("tools/call", "t9")


def test_session_tables_are_bounded() -> None:
    sessions = SessionTables(max_sessions=2, per_session=5)
    for name in ("a", "b", "c"):
        sessions.table(name).add((False, 1), Pending("x"))
    assert len(sessions) == 2
    assert sessions.find("a") is None
    assert sessions.find("c") is not None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add"}},
            [((False, 1), Pending("tools/call", "add"))],
        ),
        (
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
            },
            [
                (
                    (False, 4),
                    Pending("tools/call", "add", frozenset({"a", "b"}), (("a", "1"), ("b", "2"))),
                )
            ],
        ),
        (  # values kept for a failure's text to echo: strings and integers, short ones only
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {
                    "name": "t",
                    "arguments": {"s": "x", "f": 1.5, "t": True, "n": None, "l": "y" * 257},
                },
            },
            [((False, 5), Pending("tools/call", "t", frozenset("sftnl"), (("s", "x"),)))],
        ),
        (
            {"jsonrpc": "2.0", "id": "a", "method": "tools/list"},
            [((True, "a"), Pending("tools/list"))],
        ),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, []),
        ({"jsonrpc": "2.0", "id": 0, "method": "initialize"}, []),
        ({"jsonrpc": "2.0", "id": 2, "method": "server/discover"}, []),
        ({"jsonrpc": "2.0", "id": True, "method": "tools/list"}, []),
        ([{"jsonrpc": "2.0", "id": 3, "method": "ping"}, "junk"], [((False, 3), Pending("ping"))]),
    ],
    ids=[
        "tools-call",
        "with-arguments",
        "argument-values",
        "string-id",
        "notification",
        "initialize",
        "discover",
        "bool-id",
        "batch",
    ],
)
def test_requests_in(message: Any, expected: list[tuple[Any, Pending]]) -> None:
    assert list(requests_in(message)) == expected


def test_ids_of_different_types_do_not_collide() -> None:
    assert request_key(1) != request_key("1")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"id":1,"result":{"content":[{"type":"text","text":"3"}],"isError":false}}', False),
        (b'{"id":1,"result":{"content":[]}}', False),
        (b'{"id":1,"result":{"content":[{"type":"text","text":"\\"isError\\": true"}]}}', False),
        (b'{"id":1,"result":{"content":[],"isError":true}}', True),
        (b'{"id":1,"result":{"content":[],"isError" :\r\n\ttrue}}', True),
        (b'{"id":1,"error":{"code":-32601,"message":"Method not found"}}', True),
        (b'{"id":1,"result":{"tools":[]}}', True),
    ],
    ids=["success", "no-flag", "quoted-in-text", "tool-error", "spaced", "rpc-error", "tools"],
)
def test_only_what_may_be_upgraded_is_parsed(raw: bytes, expected: bool) -> None:
    """The byte test run before parsing: a success, `"isError": false` included, is relayed
    without being parsed; anything that may be a tool error, an error or a tool list is."""
    assert may_need_rewrite(raw) is expected
    if expected and b"isError" in raw:
        assert is_tool_error(json.loads(raw)["result"])


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"content": [], "isError": True}, True),
        ({"content": [], "isError": True, "resultType": "complete"}, True),
        ({"content": [], "isError": False}, False),
        ({"content": []}, False),
        ({"isError": True, "resultType": "input_required"}, False),
        ({"isError": True, "task": {"taskId": "t"}}, False),
    ],
    ids=["error", "complete", "success", "no-flag", "input-required", "task"],
)
def test_is_tool_error(result: dict[str, Any], expected: bool) -> None:
    assert is_tool_error(result) is expected


def test_tool_result_keeps_everything_and_appends_one_item() -> None:
    result = {
        "content": [{"type": "text", "text": "boom"}, {"type": "image", "data": "x"}],
        "structuredContent": {"a": 1},
        "isError": True,
        "_meta": {"server/own": 1, TOOL_FAILURE_KEY: {"class": "governance"}},
    }
    upgraded = upgraded_tool_result(result, PAYLOAD, "mendpoint_failure", {"class": "capability"})
    assert upgraded["content"][:2] == result["content"]
    assert json.loads(upgraded["content"][2]["text"]) == {"mendpoint_failure": PAYLOAD}
    assert len(upgraded["content"]) == 3
    assert upgraded["structuredContent"] == {"a": 1}
    assert upgraded["_meta"]["server/own"] == 1
    assert upgraded["_meta"][FAILURE_META_KEY] == PAYLOAD
    # A server's own classification is relayed unchanged, as the draft requires.
    assert upgraded["_meta"][TOOL_FAILURE_KEY] == {"class": "governance"}
    assert tool_error_text(result) == "boom"


@pytest.mark.parametrize(
    ("error", "expected_data"),
    [
        ({"code": -32602, "message": "bad"}, {FAILURE_META_KEY: PAYLOAD}),
        ({"code": -32602, "message": "bad", "data": {"k": 1}}, {"k": 1, FAILURE_META_KEY: PAYLOAD}),
        (
            {"code": -32602, "message": "bad", "data": "text"},
            {ORIGINAL_DATA_KEY: "text", FAILURE_META_KEY: PAYLOAD},
        ),
        (
            {"code": -32602, "message": "bad", "data": ""},
            {ORIGINAL_DATA_KEY: "", FAILURE_META_KEY: PAYLOAD},
        ),
        (
            {"code": -32602, "message": "bad", "data": None},
            {ORIGINAL_DATA_KEY: None, FAILURE_META_KEY: PAYLOAD},
        ),
        (
            {"code": -32601, "message": "x", "data": [1]},
            {ORIGINAL_DATA_KEY: [1], FAILURE_META_KEY: PAYLOAD},
        ),
        ({"code": -32042, "message": "URL elicitation required"}, None),
        ({"code": -32020, "message": "x"}, None),
        ({"code": -32021, "message": "x"}, None),
        ({"code": -32022, "message": "x"}, None),
    ],
    ids=[
        "no-data",
        "object-data",
        "string-data",
        "empty-string-data",
        "null-data",
        "list-data",
        "url-elicitation",
        "32020",
        "32021",
        "32022",
    ],
)
def test_jsonrpc_error_rewrite(error: dict[str, Any], expected_data: Any) -> None:
    upgraded = upgraded_error(error, PAYLOAD)
    if expected_data is None:
        assert upgraded is None
        return
    assert upgraded is not None
    assert upgraded["code"] == error["code"]
    assert upgraded["message"] == error["message"]
    assert upgraded["data"] == expected_data


def test_tools_list_guidance_is_appended_once() -> None:
    result = {
        "tools": [
            {"name": "a", "description": "Adds.", "outputSchema": {"type": "object"}},
            {"name": "b", "inputSchema": {}},
        ]
    }
    once = guided_tools_list(result, "Route on failures.")
    assert once is not None
    assert [t["description"] for t in once["tools"]] == [
        "Adds. Route on failures.",
        "Route on failures.",
    ]
    assert once["tools"][0]["outputSchema"] == {"type": "object"}
    assert guided_tools_list(once, "Route on failures.") is None


@pytest.mark.parametrize(
    ("category", "retryable", "fix", "expected"),
    [
        (
            Category.UNAVAILABLE,
            True,
            None,
            {
                "class": "reliability",
                "code": "retryable_transient_error",
                "retryable": True,
                "retryNotBefore": 1_000_001_500,
                "agentGuidance": "Retry the identical call after retryNotBefore",
            },
        ),
        (
            Category.AUTH_REQUIRED,
            False,
            "Log in",
            {"class": "governance", "code": "auth_required", "agentGuidance": "Log in"},
        ),
        (
            Category.PERMISSION_DENIED,
            False,
            None,
            {"class": "governance", "code": "permission_denied"},
        ),
        (
            Category.VALIDATION_ERROR,
            False,
            "Fix it",
            {"class": "capability", "code": "invalid_input", "agentGuidance": "Fix it"},
        ),
        (Category.CONFLICT, False, None, {"class": "capability", "code": "some_code"}),
        # Nothing specific recognised: no class claimed (the draft has no "unknown").
        (Category.UPSTREAM_ERROR, False, None, {"code": "some_code"}),
    ],
    ids=["transient", "auth", "permission", "validation", "conflict", "unrecognised"],
)
def test_tool_failure_extension_shape(
    category: Category, retryable: bool, fix: str | None, expected: dict[str, Any]
) -> None:
    shape = tool_failure(failure(category, retryable, fix), "req-1", now_ms=1_000_000_000)
    assert shape == {**expected, "correlationId": "req-1"}


async def collect(chunks: list[bytes], rewrite_to: bytes | None) -> bytes:
    out: list[bytes] = []

    async def source() -> Any:
        for chunk in chunks:
            yield chunk

    async def write(data: bytes) -> None:
        out.append(data)

    async def rewrite(data: bytes) -> bytes | None:
        return rewrite_to if data.startswith(b"{") else None

    await relay_events(source(), write, rewrite, 1 << 20)
    return b"".join(out)


STREAM = (
    b"id: prime-1\nretry: 3000\ndata:\n\n"
    b': a comment\nevent: message\nid: 7\ndata: {"jsonrpc":"2.0","id":1,\n'
    b'data: "result":{}}\n\n'
)


@pytest.mark.parametrize("split", [1, 7, 64, len(STREAM)], ids=["bytewise", "7", "64", "whole"])
async def test_sse_rewrites_only_data_and_keeps_other_lines(split: int) -> None:
    chunks = [STREAM[i : i + split] for i in range(0, len(STREAM), split)]
    out = await collect(chunks, b'{"new":1}')
    assert out == (
        b"id: prime-1\nretry: 3000\ndata:\n\n"
        b': a comment\nevent: message\nid: 7\ndata: {"new":1}\n\n'
    )


async def test_sse_unchanged_events_are_byte_identical_crlf() -> None:
    stream = b'id: 1\r\ndata: {"a":1}\r\n\r\nid: 2\r\ndata: x\r\n\r\n'
    assert await collect([stream], None) == stream


@pytest.mark.parametrize(
    ("origin", "host", "route", "refused"),
    [
        (None, "gw:8080", {}, False),
        ("http://127.0.0.1:8080", "127.0.0.1:8080", {}, False),
        ("http://gw:8080", "gw:8080", {}, True),
        ("http://evil.example", "gw:8080", {}, True),
        ("https://app.example", "gw:8080", {"allowed_origins": ["https://app.example"]}, False),
        ("https://other.example", "gw:8080", {"allowed_origins": ["https://app.example"]}, True),
        (None, "evil.example:8080", {"allowed_hosts": ["gw", "127.0.0.1:8080"]}, True),
        (None, "gw:8080", {"allowed_hosts": ["gw"]}, False),
        (None, "127.0.0.1:8080", {"allowed_hosts": ["127.0.0.1:8080"]}, False),
    ],
    ids=[
        "no-origin",
        "same-origin",
        "same-origin-dns-name",
        "foreign-origin",
        "listed",
        "unlisted",
        "bad-host",
        "host-any-port",
        "host-exact",
    ],
)
def test_origin_and_host_defence(
    origin: str | None, host: str, route: dict[str, Any], refused: bool
) -> None:
    spec = RouteSpec(name="m", type="mcp", upstream="http://127.0.0.1:1", **route)
    assert (refusal(origin, host, spec) is not None) is refused


@pytest.mark.parametrize(
    "route",
    [
        {"name": "h"},
        {"name": "h", "upstream": "http://x", "command": ["srv"]},
        {"name": "m", "type": "mcp"},
        {"name": "m", "type": "mcp", "upstream": "http://x", "command": ["srv"]},
        {"name": "h", "upstream": "http://x", "allowed_origins": ["http://a"]},
        {"name": "m", "type": "mcp", "upstream": "http://x", "allowed_origins": ["not an origin"]},
    ],
    ids=[
        "http-no-upstream",
        "http-command",
        "mcp-neither",
        "mcp-both",
        "http-origins",
        "bad-origin",
    ],
)
def test_route_validation_refuses(route: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RouteSpec(**route)


@pytest.mark.parametrize(
    ("route", "url", "expected"),
    [
        ({}, "http://127.0.0.1:9000/mcp", "https://mcp.example/mcp"),
        (
            {"prefix": "/files", "strip_prefix": True, "upstream": "http://127.0.0.1:9000/v1"},
            "http://127.0.0.1:9000/v1/.well-known/oauth-protected-resource/mcp?x=1",
            "https://mcp.example/files/.well-known/oauth-protected-resource/mcp?x=1",
        ),
        ({}, "https://auth.example/mcp", None),
        ({"upstream": "http://127.0.0.1:9000/v1"}, "http://127.0.0.1:9000/other", None),
    ],
    ids=["same-path", "prefix-stripped-and-base-path", "another-host", "outside-the-base"],
)
def test_oauth_urls_naming_the_upstream_are_made_public(
    route: dict[str, Any], url: str, expected: str | None
) -> None:
    spec = RouteSpec(
        **{
            "name": "r",
            "type": "mcp",
            "upstream": "http://127.0.0.1:9000",
            "public_url": "https://mcp.example",
            **route,
        }
    )
    built = Route.build(spec)
    assert oauth.public(url, built) == expected
    headers = CIMultiDict({"WWW-Authenticate": f'Bearer error="x", resource_metadata="{url}"'})
    oauth.rewrite_challenge(headers, built)
    assert headers["WWW-Authenticate"] == (
        f'Bearer error="x", resource_metadata="{expected or url}"'
    )


@dataclass(frozen=True)
class Site:
    """A `CallSite` with nothing but what an observation reads."""

    route_name: str = "tools"
    path: str = "/mcp"
    mode: Mode = Mode.ADDITIVE
    idempotent: bool = False

    def failure_context(self, situation: Situation) -> FailureContext:
        raise AssertionError("not needed to observe")


@given(st.text(st.characters() | st.sampled_from(["\ufeff", "\ud800", "\udfff"])))
@example("\ufeffENOENT: no such file")
@example("ENOENT \ud800 x")
@example("")
def test_a_tool_errors_handed_over_text_is_what_its_bytes_read_as(text: str) -> None:
    """The observation of a tool error holds its text without decoding it again; that text is
    the one its body would be read as, byte order mark and lone surrogates included."""
    obs = tool_error_observation(Site(), Pending("tools/call", "t"), text)
    assert obs.body is not None
    fresh = Observation(
        route="tools", method="POST", path="/mcp", kind=ObservationKind.TOOL_ERROR, body=obs.body
    )
    fresh.content_type = obs.content_type
    assert obs.text == fresh.text
