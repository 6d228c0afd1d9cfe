"""A tool error that carries the server's own envelope is read for what the server declares
(docs/rules.md#the-servers-own-envelope): as the JSON of its text item or, when the text is
prose, as its `structuredContent`; the declaration wins over the words, the message keeps the
envelope's `details`, and the delay it names is the retry delay. Through the upgrade step
`mendpoint stdio` runs, on the embedded default."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.config.loader import embedded_config
from gateway.enrich.step import Enricher
from gateway.failure import Mode
from gateway.mcp.jsonrpc import Pending
from gateway.mcp.stdio import StdioCallSite
from gateway.mcp.upgrade import Upgrader

FAILURE_KEY = "mendpoint_failure"


async def _error(result: dict[str, Any]) -> dict[str, Any]:
    """The `error` object the upgraded tool result carries."""
    loaded = embedded_config("http://127.0.0.1:9")
    enricher = Enricher.build(loaded)
    try:
        upgrader = Upgrader(enricher, loaded.config.mcp)
        site = StdioCallSite(mode=Mode.ADDITIVE, request_id="declared")
        message = {"jsonrpc": "2.0", "id": 3, "result": result}
        outcome = await upgrader.upgrade(message, Pending("tools/call", "search"), site)
    finally:
        await enricher.close()
    assert outcome is not None and outcome.message is not None
    last = outcome.message["result"]["content"][-1]
    error: dict[str, Any] = json.loads(last["text"])[FAILURE_KEY]["error"]
    return error


async def test_structured_content_is_read_when_the_text_is_prose() -> None:
    error = await _error(
        {
            "content": [{"type": "text", "text": "The index is being rebuilt."}],
            "structuredContent": {
                "message": "The index is being rebuilt.",
                "retryable": True,
                "retry_after_seconds": 7,
            },
            "isError": True,
        }
    )
    assert error["retryable"] is True and error["retry_after_ms"] == 7000
    assert error["code"] == "TOOL_DECLARED_TRANSIENT"


async def test_the_declaration_wins_over_the_words() -> None:
    # The text alone reads as refused credentials (stop); the server says: change arguments.
    envelope = {"message": "invalid token format in filter", "recoverable": "fix_params"}
    error = await _error(
        {"content": [{"type": "text", "text": json.dumps(envelope)}], "isError": True}
    )
    assert error["code"] == "TOOL_DECLARED_INVALID_ARGUMENTS" and error["fix_required"]
    assert error["message"] == "invalid token format in filter"


async def test_the_message_keeps_the_details_beside_it() -> None:
    envelope = {
        "message": "AWS service connection error: EndpointConnectionError",
        "details": 'Could not connect to the endpoint URL: "http://127.0.0.1:9/"',
        "retry_strategy": "retry_same_request",
    }
    error = await _error(
        {"content": [{"type": "text", "text": json.dumps(envelope)}], "isError": True}
    )
    assert error["retryable"] is True
    assert error["message"] == (
        "AWS service connection error: EndpointConnectionError: "
        'Could not connect to the endpoint URL: "http://127.0.0.1:9/"'
    )


@pytest.mark.parametrize("delay", [float("inf"), -1, True, "30"])
async def test_a_delay_that_is_no_number_of_time_is_not_used(delay: Any) -> None:
    text = json.dumps({"message": "busy", "retryable": True, "retry_after_ms": delay})
    error = await _error({"content": [{"type": "text", "text": text}], "isError": True})
    assert error["retryable"] is True and error["retry_after_ms"] == 1000
