"""MCP body tests see through the SDKs' wrapping (docs/rules.md#the-sdks-wrapping): the
prefixes the Python SDK, FastMCP and the TypeScript SDK put before a tool's own message, and
a JSON-RPC error's `message` read as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.classify import Classifier, Observation, ObservationKind
from gateway.classify.sdk_wrappers import inner_message
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config


def loaded_with(tmp_path: Path, rules: list[dict[str, Any]]) -> LoadedConfig:
    route = {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump({"routes": [route], "rules": rules}, sort_keys=False))
    return load_config(str(path))


def rule(rule_id: str, match: dict[str, Any], code: str) -> dict[str, Any]:
    return {"id": rule_id, "match": match, "error": {"code": code, "category": "VALIDATION_ERROR"}}


@pytest.mark.parametrize(
    ("text", "inner"),
    [
        ("Error executing tool get_time: Invalid timezone: 'Mars'", "Invalid timezone: 'Mars'"),
        (
            "Error calling tool 'list_databases': Error HTTPConnectionPool",
            "Error HTTPConnectionPool",
        ),
        ("MCP error -32603: MCP error -32603: Failed to get resource", "Failed to get resource"),
        ("Error: Git status failed: fatal", "Git status failed: fatal"),
        ("Error executing tool a: Error executing tool b", "Error executing tool b"),
        ("Error executing tool report", "Error executing tool report"),  # a crash: all there is
        ("Error executing tool report:   ", "Error executing tool report:   "),
        ("Invalid range 'A1:ZZZZZ9'", "Invalid range 'A1:ZZZZZ9'"),
        ("The Error: is elsewhere", "The Error: is elsewhere"),
    ],
)
def test_the_wrapping_prefixes_go_and_the_message_stays(text: str, inner: str) -> None:
    assert inner_message(text) == inner


def _classifier(tmp_path: Path) -> Classifier:
    anchored = rule("starts-invalid", {"mcp": {}, "body": "^Invalid\\b"}, "STARTS_INVALID")
    return Classifier(loaded_with(tmp_path, [anchored]))


def _tool_error(text: str) -> Observation:
    return Observation(
        route="stdio",
        method="POST",
        path="/",
        kind=ObservationKind.TOOL_ERROR,
        body=text.encode(),
        tool="t",
        idempotent=False,
    )


def test_an_anchored_rule_finds_the_message_behind_the_sdk_prefix(tmp_path: Path) -> None:
    classifier = _classifier(tmp_path)
    for text in (
        "Invalid range 'A1:ZZZZZ9'",
        "Error executing tool read_range: Invalid range 'A1:ZZZZZ9'",
        "Error calling tool 'read_range': Invalid range",
    ):
        verdict = classifier.classify(_tool_error(text))
        assert verdict is not None and verdict.rule.id == "starts-invalid", text
        assert verdict.failure.message == text  # the server's words whole, prefix and all
    verdict = classifier.classify(_tool_error("Error executing tool x: the range is Invalid"))
    assert verdict is not None and verdict.rule.id != "starts-invalid"


def test_a_jsonrpc_errors_message_is_read_as_text(tmp_path: Path) -> None:
    error = {"code": -32603, "message": "MCP error -32603: Invalid arguments: value: Required"}
    obs = Observation(
        route="stdio",
        method="POST",
        path="/",
        kind=ObservationKind.JSONRPC_ERROR,
        body=json.dumps(error).encode(),
        content_type="application/json",
        tool="set",
        jsonrpc_code=-32603,
    )
    verdict = _classifier(tmp_path).classify(obs)
    assert verdict is not None and verdict.rule.id == "starts-invalid"


def test_http_bodies_are_not_read_through_mcp_wrappers(tmp_path: Path) -> None:
    http = rule("http-invalid", {"status": [400], "body": "^Invalid\\b"}, "HTTP_INVALID")
    classifier = Classifier(loaded_with(tmp_path, [http]))
    obs = Observation(
        route="api",
        method="GET",
        path="/x",
        kind=ObservationKind.STATUS,
        status=400,
        body=b"Error: Invalid x",
    )
    verdict = classifier.classify(obs)
    assert verdict is not None and verdict.rule.id != "http-invalid"
