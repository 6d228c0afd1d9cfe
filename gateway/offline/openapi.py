"""Reading an OpenAPI document (3.0 or 3.1, JSON or YAML, a file or a URL) for `mendpoint init`.

Only what a starter config needs: each operation's method, path template and operationId,
and each documented error response (status, description, an error code the schema or an
example states, and the examples themselves). `$ref`s to `components` are followed.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
MAX_DOCUMENT_BYTES = 32 << 20


class OpenApiError(ValueError):
    """The document cannot be read or is not OpenAPI 3.x."""


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    status: int
    description: str
    content_type: str | None
    examples: tuple[Any, ...] = ()
    """Example bodies (parsed JSON, or text), from `example` and `examples`."""


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str
    operation_id: str | None
    errors: tuple[ErrorResponse, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ApiDocument:
    title: str
    version: str
    operations: tuple[Operation, ...]
    schema_names: frozenset[str]
    raw: dict[str, Any]


def load(source: str, timeout_s: float = 10) -> ApiDocument:
    """The document at `source`: a path, or an http(s) URL."""
    text = _read(source, timeout_s)
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise OpenApiError(f"{source}: not JSON or YAML: {exc}") from exc
    return parse(data, source)


def parse(data: object, source: str = "<document>") -> ApiDocument:
    if not isinstance(data, dict) or not str(data.get("openapi", "")).startswith("3."):
        raise OpenApiError(f"{source}: not an OpenAPI 3.x document (no 'openapi: 3.x' key)")
    info = _mapping(data.get("info"))
    operations = []
    paths = _mapping(data.get("paths"))
    for path, item in paths.items():
        if not isinstance(item, dict):
            continue
        for method in METHODS:
            spec = item.get(method)
            if isinstance(spec, dict):
                operations.append(_operation(data, method.upper(), str(path), spec))
    schemas = _mapping(_mapping(data.get("components")).get("schemas"))
    return ApiDocument(
        title=str(info.get("title", "")),
        version=str(info.get("version", "")),
        operations=tuple(operations),
        schema_names=frozenset(schemas),
        raw=data,
    )


def _read(source: str, timeout_s: float) -> str:
    if re.match(r"^https?://", source):
        try:
            with urllib.request.urlopen(source, timeout=timeout_s) as answer:
                raw: bytes = answer.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise OpenApiError(f"{source}: cannot fetch: {exc}") from exc
    else:
        try:
            raw = Path(source).read_bytes()
        except OSError as exc:
            raise OpenApiError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise OpenApiError(f"{source}: larger than {MAX_DOCUMENT_BYTES >> 20} MiB")
    return raw.decode("utf-8-sig", errors="replace")


def _operation(doc: dict[str, Any], method: str, path: str, spec: dict[str, Any]) -> Operation:
    errors = []
    responses = _mapping(spec.get("responses"))
    for status_text, response in responses.items():
        status = _status(str(status_text))
        if status is None or status < 400:
            continue
        response = resolve(doc, response)
        if not isinstance(response, dict):
            continue
        content = _mapping(response.get("content"))
        content_type = next(iter(content), None)
        media = _mapping(resolve(doc, content.get(content_type))) if content_type else {}
        errors.append(
            ErrorResponse(
                status=status,
                description=str(response.get("description", "")).strip(),
                content_type=content_type,
                examples=tuple(_examples(doc, media)),
            )
        )
    operation_id = spec.get("operationId")
    return Operation(
        method,
        path,
        operation_id if isinstance(operation_id, str) else None,
        tuple(sorted(errors, key=lambda e: e.status)),
    )


def _mapping(value: object) -> dict[str, Any]:
    """A JSON object, or {} for anything else: a malformed document reads as empty parts."""
    return value if isinstance(value, dict) else {}


def _status(text: str) -> int | None:
    """`409` → 409; ranges (`4XX`) and `default` say no more than the status: None."""
    return int(text) if text.isdigit() and 100 <= int(text) <= 599 else None


def _examples(doc: dict[str, Any], media: dict[str, Any]) -> list[Any]:
    found = []
    if "example" in media:
        found.append(media["example"])
    examples = media.get("examples")
    if isinstance(examples, dict):
        for example in examples.values():
            example = resolve(doc, example)
            if isinstance(example, dict) and "value" in example:
                found.append(example["value"])
    schema = resolve(doc, media.get("schema", {}))
    if not found and isinstance(schema, dict) and "example" in schema:
        found.append(schema["example"])
    return found


def resolve(doc: dict[str, Any], node: Any, depth: int = 0) -> Any:
    """Follow a local `$ref` (`#/components/...`), a few levels deep at most."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < 16:
        ref: str = node["$ref"]
        if not ref.startswith("#/"):
            return {}
        target: Any = doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
        node = target if target is not None else {}
        depth += 1
    return node
