"""Rendering for each mode: the shapes and advisory headers of docs/spec.md."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.enrich.envelope import FailureFacts, additive
from gateway.exchange.answer import advisory_headers, render
from gateway.failure import (
    NO_RECOVERY,
    Category,
    Failure,
    Mode,
    Recovery,
    RecoveryOption,
    TransportKind,
)

CORRECTABLE = Failure(
    code="CSV_MALFORMED",
    category=Category.VALIDATION_ERROR,
    message="Row 2 has 4 columns",
    retryable=False,
    retry_after_ms=None,
    fix_required="Make every row match the header",
    fix_command=None,
    suggestion=None,
    recovery_intent="format_inspection",
    rule_id="csv-malformed",
    from_default_rule=False,
)
TRANSIENT = Failure(
    code="RATE_LIMITED",
    category=Category.RATE_LIMITED,
    message="slow down",
    retryable=True,
    retry_after_ms=1500,
    fix_required=None,
    fix_command=None,
    suggestion=None,
    recovery_intent=None,
    rule_id="http-429",
    from_default_rule=True,
)
JSON = "application/json"
OPTION = RecoveryOption(1, "schema.infer_csv_schema", "1.0.0", "Inspect the CSV", "data.csv")


def facts(body: Any = None, **kwargs: Any) -> FailureFacts:
    raw = json.dumps(body).encode() if body is not None else b"<html>oops</html>"
    return FailureFacts(
        request_id="req-1",
        duration_ms=3,
        upstream_status=400,
        content_type="application/json",
        body=raw,
        **kwargs,
    )


def test_envelope_shape_matches_spec() -> None:
    rendering = render(Mode.ENVELOPE, CORRECTABLE, Recovery((OPTION,)), facts({"e": 1}), "X-Error-")
    assert rendering.content_type == "application/json"
    assert rendering.body is not None
    body = json.loads(rendering.body)
    assert body["ok"] is False and body["data"] is None and body["warnings"] == []
    assert body["error"] == {
        "code": "CSV_MALFORMED",
        "message": "Row 2 has 4 columns",
        "retryable": False,
        "retry_after_ms": None,
        "fix_required": "Make every row match the header",
        "fix_command": None,
        "suggestion": None,
        "request_id": "req-1",
        "recoverable": True,
        "recovery_available": True,
    }
    assert body["failure"] == {
        "category": "VALIDATION_ERROR",
        "code": "CSV_MALFORMED",
        "recoverable": True,
        "retryable": False,
        "recovery_intent": {"intent": "format_inspection"},
    }
    assert body["recovery"]["options"][0]["then_retry"] == {
        "skill_name": "data.csv",
        "advisory": True,
    }
    assert body["meta"] == {
        "duration_ms": 3,
        "upstream_status": 400,
        "rule": "csv-malformed",
        "exit_code": 2,
        "original": {"content_type": "application/json", "body": {"e": 1}},
    }


def test_envelope_keeps_non_json_original_as_text() -> None:
    rendering = render(Mode.ENVELOPE, CORRECTABLE, NO_RECOVERY, facts(None), "X-Error-")
    assert rendering.body is not None
    assert json.loads(rendering.body)["meta"]["original"]["body"] == "<html>oops</html>"


@pytest.mark.parametrize(
    ("upstream", "expected_error"),
    [
        ({"message": "m"}, "added"),
        ({"error": {"code": "E1", "message": "theirs"}}, "merged"),
        ({"error": "Bad Request"}, "left"),
        ({"error": None}, "left"),
    ],
    ids=["no-error", "error-object", "error-string", "error-null"],
)
def test_additive_adds_only_where_absent(upstream: dict[str, Any], expected_error: str) -> None:
    """A null `error` is a value the upstream wrote: left as it is, like a string."""
    spliced = additive(json.dumps(upstream).encode(), JSON, CORRECTABLE, NO_RECOVERY, "req-1")
    assert spliced is not None
    merged = json.loads(spliced)
    for key, value in upstream.items():
        assert merged[key] == value or key == "error"
    assert merged["failure"]["code"] == "CSV_MALFORMED"
    assert merged["recovery"] == {"available": False, "options": []}
    assert merged["recoverable"] is True and merged["recovery_available"] is False
    if expected_error == "added":
        assert merged["error"]["code"] == "CSV_MALFORMED"
        assert merged["error"]["request_id"] == "req-1"
    elif expected_error == "merged":
        assert merged["error"]["code"] == "E1"
        assert merged["error"]["message"] == "theirs"
        assert merged["error"]["fix_required"] == "Make every row match the header"
        assert merged["error"]["recovery_available"] is False
    else:
        assert merged["error"] == upstream["error"]
        assert merged["failure"]["fix_required"] == "Make every row match the header"
        assert merged["failure"]["request_id"] == "req-1"


@pytest.mark.parametrize(
    "body", [[1, 2], "text", 3, None], ids=["array", "string", "number", "none"]
)
def test_additive_leaves_non_objects_alone(body: Any) -> None:
    raw = None if body is None else json.dumps(body).encode()
    assert additive(raw, JSON, CORRECTABLE, NO_RECOVERY, "r") is None
    rendering = render(Mode.ADDITIVE, CORRECTABLE, NO_RECOVERY, facts(body), "X-Error-")
    assert rendering.body is None
    assert ("X-Error-Code", "CSV_MALFORMED") in rendering.headers


def test_headers_mode_only_adds_headers() -> None:
    rendering = render(Mode.HEADERS, TRANSIENT, NO_RECOVERY, facts({"a": 1}), "X-Error-")
    assert rendering.body is None and rendering.content_type is None
    assert dict(rendering.headers) == {
        "X-Error-Code": "RATE_LIMITED",
        "X-Error-Retryable": "true",
        "X-Error-Recoverable": "false",
        "X-Recovery-Available": "false",
        "Retry-After": "2",
    }


def test_original_mode_changes_nothing() -> None:
    rendering = render(Mode.ORIGINAL, TRANSIENT, NO_RECOVERY, facts({"a": 1}), "X-Error-")
    assert rendering.headers == [] and rendering.body is None


def test_retry_after_not_duplicated_when_upstream_sent_one() -> None:
    names = [n for n, _ in advisory_headers(TRANSIENT, NO_RECOVERY, "X-Error-", True)]
    assert "Retry-After" not in names


def test_prefix_is_configurable() -> None:
    names = [n for n, _ in advisory_headers(CORRECTABLE, NO_RECOVERY, "X-Mend-", False)]
    assert names == [
        "X-Mend-Code",
        "X-Mend-Retryable",
        "X-Mend-Recoverable",
        "X-Recovery-Available",
    ]


@pytest.mark.parametrize("mode", list(Mode), ids=[m.value for m in Mode])
def test_synthesised_failure_per_mode(mode: Mode) -> None:
    synth = FailureFacts(
        request_id="r", duration_ms=1, upstream_status=None, transport=TransportKind.CONNECT_REFUSED
    )
    rendering = render(mode, TRANSIENT, NO_RECOVERY, synth, "X-Error-")
    assert rendering.body is not None
    if mode in (Mode.ADDITIVE, Mode.ENVELOPE):
        body = json.loads(rendering.body)
        assert body["meta"]["transport"] == "connect_refused"
        assert body["meta"]["original"] is None
        assert rendering.content_type == "application/json"
    else:
        assert rendering.body.startswith(b"RATE_LIMITED: ")
        assert rendering.content_type == "text/plain; charset=utf-8"
    assert bool(rendering.headers) == (mode is not Mode.ORIGINAL)
