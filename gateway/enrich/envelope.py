"""Rendering a classified failure for each delivery mode (docs/spec.md, Shapes and Headers).

Takes a `Failure`, its `Recovery` and what the upstream sent; returns a `Rendering`: the
headers to add and, when the body changes, the new body and content type. The status is never
changed here. Header values are built only from rule constants and booleans, so nothing the
upstream wrote can put CR/LF or other bytes into a header.

In `additive` mode an HTML or text page is the upstream's to send, except to a client that
prefers JSON on a route that answers such clients with JSON (`routes[].json_for_json_clients`):
that client gets the envelope, and every answer that depended on `Accept` says so in `Vary`.
`meta.original` carries what the route's `meta_original` keeps of the body, redacted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gateway.classify.redact import Redactor
from gateway.config.route_model import MetaOriginalSpec
from gateway.failure import Failure, Mode, Recovery, Refusal, TransportKind
from gateway.text.body_text import BodyText, body_text, declared_text
from gateway.text.json_insert import ObjectText, members_text, scan_document, scan_object_at
from gateway.text.json_text import Raw, as_raw, dump

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
PAGE_TYPES = frozenset(
    {"text/html", "application/xhtml+xml", "text/plain", "application/xml", "text/xml"}
)
"""Bodies a JSON client cannot use: enveloped for it when its route says so. Also any
`+xml` type, and text sent untyped or as `application/octet-stream` (nginx's default type)."""
UNTYPED = frozenset({"", "application/octet-stream"})
TEXT_PROBE_BYTES = 1024
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
    upstream_retry_after: bool = False
    json_clients: bool = False
    """The route answers a JSON client's HTML or text error with the envelope."""
    prefers_json: bool = False
    """The request's `Accept` prefers JSON over HTML (`gateway.text.accept`)."""
    original: MetaOriginalSpec = KEEP_ALL
    """What `meta.original` keeps of the body (the route's `meta_original`)."""


@dataclass(frozen=True, slots=True)
class Rendering:
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    content_type: str | None = None


def render(
    mode: Mode,
    failure: Failure,
    recovery: Recovery,
    facts: FailureFacts,
    prefix: str,
    redactor: Redactor | None = None,
) -> Rendering:
    """The response changes for `mode`; a `body` of None means "send the upstream's body".

    `redactor` cleans what `meta.original` copies of the body (the failure's message and
    fields come already redacted from the enrichment step)."""
    headers = advisory_headers(failure, recovery, prefix, facts.upstream_retry_after)
    synthesized = facts.transport is not None
    if mode is Mode.ORIGINAL:
        if synthesized:
            return Rendering([], _plain_reason(failure), TEXT_TYPE)
        return Rendering()
    if mode is Mode.HEADERS:
        return Rendering(
            headers,
            _plain_reason(failure) if synthesized else None,
            TEXT_TYPE if synthesized else None,
        )
    if mode is Mode.ENVELOPE or synthesized or facts.refusal is not None:
        # No upstream body to add to: the envelope is the whole answer. (In `original` and
        # `headers` modes the gateway's own plain-text answer stays, as it was.)
        return Rendering(headers, dump(envelope(failure, recovery, facts, redactor)), JSON_TYPE)
    merged = additive(facts.body, facts.content_type, failure, recovery, facts.request_id)
    if merged is not None:
        return Rendering(headers, merged, None)
    if facts.json_clients and is_page(facts.content_type, facts.body):
        headers.append(("Vary", "Accept"))  # a cache must not give one client's answer to the other
        if facts.prefers_json:
            body = dump(envelope(failure, recovery, facts, redactor))
            return Rendering(headers, body, JSON_TYPE)
    return Rendering(headers)


def is_page(content_type: str, body: bytes | None = None) -> bool:
    """An HTML, plain-text or XML body (the media type, parameters aside), or a text body
    whose type says nothing (none, or `application/octet-stream`)."""
    media = content_type.partition(";")[0].strip().lower()
    if media in PAGE_TYPES or media.endswith("+xml"):
        return True
    return media in UNTYPED and bool(body) and _reads_as_text(body or b"")


def _reads_as_text(body: bytes) -> bool:
    """UTF-8 with no control characters but line breaks and tabs (a cut character at the
    probe's end aside)."""
    head = body[:TEXT_PROBE_BYTES]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:
            return False
        text = head[: exc.start].decode("utf-8")
    return not any((c < " " and c not in "\t\r\n") or c == "\x7f" for c in text)


def advisory_headers(
    failure: Failure, recovery: Recovery, prefix: str, upstream_retry_after: bool
) -> list[tuple[str, str]]:
    headers = [
        (f"{prefix}Code", failure.code),
        (f"{prefix}Retryable", _bool(failure.retryable)),
        (f"{prefix}Recoverable", _bool(failure.recoverable)),
        ("X-Recovery-Available", _bool(recovery.available)),
    ]
    if failure.retryable and failure.retry_after_ms is not None and not upstream_retry_after:
        headers.append(("Retry-After", retry_after_value(failure.retry_after_ms)))
    return headers


def retry_after_value(retry_after_ms: int) -> str:
    """`Retry-After` in whole seconds, rounded up, for a delay in milliseconds."""
    return str(math.ceil(retry_after_ms / 1000))


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


def _plain_reason(failure: Failure) -> bytes:
    return f"{failure.code}: {failure.message}\n".encode()


def _bool(value: bool) -> str:
    return "true" if value else "false"
