"""The shapes of a classified failure (docs/spec.md, Shapes): the `error` and `failure`
objects, the whole envelope, and the additive insertion into an upstream's JSON object.

Transport-neutral: an HTTP answer (gateway/exchange/answer.py decides which shape each mode
and case gets, and every header), an MCP tool result or JSON-RPC error
(gateway/mcp/upgrade.py) and `mendpoint explain` are built from these. `meta.original`
carries what the route's `meta_original` keeps of the body, redacted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.classify.redact import Redactor
from gateway.config.route_model import MetaOriginalSpec
from gateway.failure import Failure, Recovery, Refusal, TransportKind
from gateway.text.body_text import BodyText, body_text, declared_text
from gateway.text.json_insert import ObjectText, members_text, scan_document, scan_object_at
from gateway.text.json_text import Raw, as_raw

KEEP_ALL = MetaOriginalSpec()


@dataclass(frozen=True, slots=True)
class FailureFacts:
    """The facts of one failed exchange a rendering is built from: the request's id and
    duration, and what the upstream answered (a status and body, or a transport fault)."""

    request_id: str
    duration_ms: int
    upstream_status: int | None
    content_type: str = ""
    body: bytes | None = None
    transport: TransportKind | None = None
    refusal: Refusal | None = None
    """The gateway answered the request itself: there is no upstream answer at all."""
    original: MetaOriginalSpec = KEEP_ALL
    """What `meta.original` keeps of the body (the route's `meta_original`)."""


def error_object(failure: Failure, recovery: Recovery, request_id: str) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": failure.code,
        "message": failure.message,
        "retryable": failure.retryable,
        "retry_after_ms": failure.retry_after_ms,
        "fix_required": failure.fix_required,
        "fix_command": failure.fix_command,
        "suggestion": failure.suggestion,
        "request_id": request_id,
        "recoverable": failure.recoverable,
        "recovery_available": recovery.available,
    }
    if failure.fields:  # only when the upstream named the fields at fault
        error["fields"] = [f.to_json() for f in failure.fields]
    return error


def failure_object(failure: Failure) -> dict[str, Any]:
    intent = {"intent": failure.recovery_intent} if failure.recovery_intent else None
    return {
        "category": failure.category.value,
        "code": failure.code,
        "recoverable": failure.recoverable,
        "retryable": failure.retryable,
        "recovery_intent": intent,
    }


def envelope(
    failure: Failure, recovery: Recovery, facts: FailureFacts, redactor: Redactor | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "duration_ms": facts.duration_ms,
        "upstream_status": facts.upstream_status,
        "rule": failure.rule_id,
        "exit_code": failure.exit_code,
        "original": _original(facts, redactor),
    }
    if facts.transport is not None:
        meta["transport"] = facts.transport.value
    if facts.refusal is not None:
        meta["refusal"] = facts.refusal.value
    return {
        "ok": False,
        "data": None,
        "error": error_object(failure, recovery, facts.request_id),
        "failure": failure_object(failure),
        "recovery": recovery.to_json(),
        "warnings": [],
        "meta": meta,
    }


def additive(
    body: bytes | None, content_type: str, failure: Failure, recovery: Recovery, request_id: str
) -> bytes | None:
    """The upstream's JSON object with failure members inserted where absent; None when the
    body is not one JSON object in a text it declares (it then passes untouched).

    Only inserts: every byte the upstream wrote stays as it was, in its own charset
    (docs/transparency.md, Additive mode). Where the fields go is docs/spec.md's `additive`.
    """
    decoded = None if body is None else body_text(body, content_type)
    if body is None or decoded is None:
        return None
    text = decoded.text
    top = scan_document(text)
    if top is None:
        return None
    fields = error_object(failure, recovery, request_id)
    failure_block = failure_object(failure)
    present = top.names()
    inserts: list[tuple[int, ObjectText, list[tuple[str, Any]]]] = []
    top_additions: list[tuple[str, Any]] = []
    error = top.last("error")
    inner = None if error is None else scan_object_at(text, error.start)
    if error is None:
        top_additions.append(("error", fields))
    elif inner is not None:
        missing = [(k, v) for k, v in fields.items() if k not in inner.names()]
        inserts.append((inner.tail, inner, missing))
    else:  # `"error": "Bad Request"`, a list, or null: left as it is
        failure_block.update({k: v for k, v in fields.items() if k not in failure_block})
    for name, value in (
        ("failure", failure_block),
        ("recovery", recovery.to_json()),
        ("recoverable", failure.recoverable),
        ("recovery_available", recovery.available),
    ):
        if name not in present:
            top_additions.append((name, value))
    inserts.append((top.tail, top, top_additions))
    return _spliced(body, decoded, inserts)


def _spliced(
    body: bytes, decoded: BodyText, inserts: list[tuple[int, ObjectText, list[tuple[str, Any]]]]
) -> bytes:
    """The body's own bytes with each insertion's members, in its encoding, at its place."""
    out: list[bytes] = []
    done = 0
    for position, found, additions in sorted(inserts, key=lambda i: i[0]):
        at = decoded.offset(position)
        out.append(body[done:at])
        out.append(decoded.encode_json(members_text(found, additions)))
        done = at
    out.append(body[done:])
    return b"".join(out)


def _original(facts: FailureFacts, redactor: Redactor | None) -> dict[str, Any] | None:
    """The upstream's body as `meta.original` keeps it: whole, cut or left out (its length
    said), redacted before it is cut so a secret is never half kept. A JSON body goes in as
    the JSON it is (its own text when nothing was masked); anything else, `NaN` included,
    as a string."""
    if facts.transport is not None or facts.body is None:
        return None
    original: dict[str, Any] = {"content_type": facts.content_type or None}
    keep = facts.original
    if keep.body == "none":
        return {**original, "body": None, "bytes": len(facts.body)}
    text = declared_text(facts.body, facts.content_type)
    copied: Raw | str | None = as_raw(text) if redactor is None else redactor.body(text)
    body: Raw | str = text if copied is None else copied
    if keep.body == "truncated" and len(facts.body) > keep.max_bytes:
        clean = body.text if isinstance(body, Raw) else body
        cut = clean.encode("utf-8")[: keep.max_bytes].decode("utf-8", "ignore")
        return {**original, "body": cut, "truncated": True, "bytes": len(facts.body)}
    return {**original, "body": body}
