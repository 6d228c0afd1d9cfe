"""`mendpoint init`: a commented starter config for an API you don't own (docs/rules.md).

From the upstream URL and, when there is one, its OpenAPI document:
- one route to the upstream, with each operation's `operationId` as the name `then_retry`
  uses for it (`operations:`), and the idempotent methods spelled out;
- a rule per documented error response that says more than its status (a code from its
  description or its example's code field, a category from the status, a match on method,
  path and status), and a fixture per example (or a minimal one where the document has none);
- the shipped packs that fit, guessed from the document and from a probe of one unknown path;
- `review:` comments on everything guessed.

Nothing it writes is unsafe by construction: no retryable rule on a non-idempotent method,
no `fix_command` (a human adds commands to the registry).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import yaml

from gateway.classify.html_message import looks_like_xml, xml_code
from gateway.config.admin_address import DEFAULT_ADMIN
from gateway.config.jsonpath import parse_json_path
from gateway.config.loader import builtin_text
from gateway.config.route_model import DEFAULT_IDEMPOTENT
from gateway.failure import Category
from gateway.offline.openapi import ApiDocument, ErrorResponse, Operation
from gateway.offline.probe import Probe
from gateway.offline.yaml_writer import Comment, Mapping, Noted, Sequence, block, emit

TOKEN_FILE = "mendpoint-admin-token"
DRAFTS_FILE = "console-drafts.yaml"
"""The admin token file `init` writes beside the config (and names relative to it)."""
MAX_CODE_CHARS = 48
"""A drafted code's length at most: whole words, so `error.code` stays a readable constant."""
GENERIC_WORDS = frozenset(
    {"error", "errors", "response", "failed", "failure", "invalid", "request", "the", "a", "an"}
)
TRANSIENT = (Category.RATE_LIMITED, Category.UNAVAILABLE, Category.TIMEOUT)
FIX_REQUIRED = {
    Category.VALIDATION_ERROR: "Correct the request as the message describes, then reissue it",
    Category.PAYLOAD_TOO_LARGE: "Send a smaller request body, then reissue it",
    Category.AUTH_REQUIRED: "Authenticate (send valid credentials), then reissue the request",
}


@dataclass(frozen=True, slots=True)
class DraftRule:
    id: str
    operation: Operation
    error: ErrorResponse
    code: str
    category: Category
    code_source: str
    stated: ExampleCode | None = None


@dataclass
class Starter:
    """What `init` writes: the config text and the fixture cases beside it."""

    config: str
    fixtures: list[dict[str, Any]] = field(default_factory=list)
    rules: list[DraftRule] = field(default_factory=list)
    packs: list[str] = field(default_factory=list)


def category_for(status: int) -> Category:
    """The category the shipped fallback rule gives a bare `status` (http-defaults), so a
    starter rule and the fallback it replaces agree; 4xx/5xx by class otherwise."""
    category = _default_categories().get(status)
    if category is not None:
        return category
    return Category.VALIDATION_ERROR if status < 500 else Category.UPSTREAM_ERROR


@functools.cache
def _default_categories() -> dict[int, Category]:
    pack = yaml.safe_load(builtin_text("http-defaults"))
    found: dict[int, Category] = {}
    for rule in pack.get("rules", []):
        match = rule.get("match", {})
        if set(match) - {"status", "methods"}:
            continue  # a rule for one shape of the status, not for the status itself
        for status in match.get("status", []):
            if isinstance(status, int):
                found.setdefault(status, Category(rule["error"]["category"]))
    return found


def upper_snake(text: str) -> str:
    """ "Order already exists" → ORDER_ALREADY_EXISTS: as many whole words as fit in
    `MAX_CODE_CHARS` (a code is never cut inside a word; only a first word longer than that
    is cut)."""
    words = re.findall(r"[A-Za-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text))
    code = ""
    for word in (w.upper() for w in words):
        joined = f"{code}_{word}" if code else word
        if len(joined) + (2 if joined[0].isdigit() else 0) > MAX_CODE_CHARS:
            break
        code = joined
    if not code and words:
        code = words[0].upper()[: MAX_CODE_CHARS - 2]
    if code and code[0].isdigit():
        code = "E_" + code
    return code


def says_more_than_status(description: str, status: int) -> bool:
    """ "Order already exists" does; "Not Found", "Validation Error", "Error" do not."""
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", description)}
    try:
        phrase = {w.lower() for w in HTTPStatus(status).phrase.split()}
    except ValueError:
        phrase = set()
    return bool(words - phrase - GENERIC_WORDS - {"validation", "unprocessable", "content"})


@dataclass(frozen=True, slots=True)
class ExampleCode:
    """An error code an example states, and where: the rule matches on it too."""

    code: str
    json_path: str
    value: str
    element: str | None = None
    """For an XML body (`xml_stated_code`): the element as the body holds it,
    `<code>AUDIT_FORBIDDEN</code>`, which a `body:` regex matches; `json_path` is then ""."""


# Where a body states a machine-readable code, most specific first: `error.code` (AIP-193,
# Stripe), the OCI registry's and JSON:API's `errors[*].code`, GraphQL's
# `errors[*].extensions.code`, AWS's `__type` (its namespace before `#` dropped) and `Code`,
# Prometheus's `errorType`, the older APIs' `errorCode` (Salesforce, many Java and .NET ones),
# a bare `code` or `type`, and OAuth's string `error`.
CODE_PATHS = tuple(
    parse_json_path(path)
    for path in (
        "error.code",
        "errors[*].code",
        "errors[*].extensions.code",
        "__type",
        "Code",
        "errorType",
        "errorCode",
        "code",
        "type",
        "error",
    )
)
# A code, not a sentence, a URI or a number (the status repeated says nothing new).
CODE_VALUE = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{1,62}")


def stated_code(body: Any) -> ExampleCode | None:
    """The error code a JSON body states itself, and where: a rule can match on it."""
    for path in CODE_PATHS:
        for value, _ in path.find(body):
            name = value.rpartition("#")[2] if isinstance(value, str) else ""
            if CODE_VALUE.fullmatch(name):
                code = upper_snake(name.replace(".", "_").replace("-", "_"))
                return ExampleCode(code, path.text, value)
    return None


def xml_stated_code(content_type: str, text: str) -> ExampleCode | None:
    """The error code an XML body states in `<code>`, `<errorCode>` or `<faultcode>`."""
    if not looks_like_xml(content_type, text):
        return None
    found = xml_code(text)
    if found is None or not CODE_VALUE.fullmatch(found[0]):
        return None
    value, element = found
    return ExampleCode(upper_snake(value.replace(".", "_").replace("-", "_")), "", value, element)


def code_from_example(examples: tuple[Any, ...]) -> ExampleCode | None:
    """An error code one of the documented examples states (`stated_code`)."""
    for example in examples:
        if (stated := stated_code(example)) is not None:
            return stated
    return None


def draft_rules(document: ApiDocument, route: str) -> tuple[list[DraftRule], list[str]]:
    """The rules worth writing, and a note for each documented error left to the packs."""
    rules, skipped = [], []
    used: set[str] = set()
    for op in document.operations:
        for error in op.errors:
            where = f"{op.method} {op.path} → {error.status}"
            category = category_for(error.status)
            if category in TRANSIENT and op.method not in DEFAULT_IDEMPOTENT:
                skipped.append(
                    f"{where}: left to the shipped rules (a retryable rule on "
                    f"{op.method} could replay a request that had an effect)"
                )
                continue
            stated = code_from_example(error.examples)
            if stated is not None:
                code, source = stated.code, f"the example's {stated.json_path} field"
            elif says_more_than_status(error.description, error.status):
                code, source = upper_snake(error.description), "the response description"
            else:
                skipped.append(f'{where} "{error.description}": says no more than its status')
                continue
            if not code:
                continue
            base = re.sub(r"[^A-Za-z0-9_.:\-]", "-", op.operation_id or f"{op.method}-{op.path}")
            rule_id = f"{base.strip('-')}-{error.status}"[:120]
            while rule_id in used:
                rule_id += "-2"
            used.add(rule_id)
            rules.append(DraftRule(rule_id, op, error, code, category, source, stated))
    return rules, skipped


def path_glob(template: str) -> str:
    """`/orders/{id}/items` → `/orders/*/items`: one path segment per parameter."""
    return re.sub(r"\{[^/}]+\}", "*", template)


def example_path(template: str) -> str:
    return re.sub(r"\{[^/}]+\}", "1", template)


@dataclass(frozen=True, slots=True)
class Loop:
    """Where the retrofit loop keeps what it learns: the captures, the admin token file, and
    the rule file the console may save to (`console.drafts_file`; None: the console stays
    read-only, and nothing names a file that is not there)."""

    captures: str = "captures"
    token_file: str = TOKEN_FILE
    drafts_file: str | None = None


def build(
    upstream: str,
    document: ApiDocument | None,
    source: str | None,
    probe: Probe | None,
    available_packs: list[str],
    route: str = "api",
    loop: Loop = Loop(),
) -> Starter:
    """The starter, written through `yaml_writer`: the document's paths, operation ids and
    descriptions and the probe's evidence come from the upstream, and none of them may add
    to the file (docs/security.md#drafted-yaml). It starts the retrofit loop
    (docs/operations.md#the-rollout-loop): `headers` mode, capture of what no rule names,
    and the admin listener on loopback with its token."""
    packs = [p for p in guess_packs(document, probe) if p in available_packs]
    rules, skipped = draft_rules(document, route) if document is not None else ([], [])
    config = Mapping().add("listen", "127.0.0.1:8080")
    config.note("The admin listener: /gaps, /followups, /metrics and the console, loopback only.")
    config.note("Its token (written beside this file, mode 0600) is what `mendpoint gaps` and")
    config.note("`mendpoint suggest --from` send, and what POST /gaps/reset needs.")
    config.add("admin", DEFAULT_ADMIN).add("admin_token_file", loop.token_file)
    _include(config, packs, probe, loop.drafts_file)
    if loop.drafts_file is not None:
        config.note("The console's Save (a tried rule) and its Routes page's move to additive")
        config.note("write this file only; remove this block to keep the console read-only.")
        config.add("console", Mapping().add("drafts_file", loop.drafts_file))
    config.add("routes", Sequence([_route(route, upstream, document, loop)]))
    for note in skipped:
        config.note(f"not a rule: {note}")
    config.add("rules", Sequence([item for rule in rules for item in _rule(rule, route)]))
    text = emit(config, _header(upstream, document, source))
    fixtures = [case for rule in rules for case in _fixtures(rule)]
    return Starter(config=text, fixtures=fixtures, rules=rules, packs=packs)


def render_fixtures(starter: Starter, config_file: str, fixtures_file: str) -> str:
    """The starter's fixture file, through `yaml_writer` as the config is."""
    header = (
        f"Fixtures for {config_file}, written by `mendpoint init` from the document's",
        "examples (a minimal case where it has none). Run:",
        f"  mendpoint test --config {config_file} {fixtures_file}",
    )
    return emit(Mapping().add("cases", block(starter.fixtures)), header)


def guess_packs(document: ApiDocument | None, probe: Probe | None) -> list[str]:
    """Packs whose shapes the API announces, most specific first."""
    found: list[str] = []
    if document is not None and {"HTTPValidationError", "ValidationError"} <= document.schema_names:
        found.append("fastapi")
    if probe is not None:
        found.extend(p for p in probe.stacks if p not in found)
    return found


def _header(upstream: str, document: ApiDocument | None, source: str | None) -> tuple[str, ...]:
    if document is not None:
        title = f"{document.title} {document.version}".strip()
        origin = f"From the OpenAPI document {json.dumps(title, ensure_ascii=False)} ({source})."
    else:
        origin = "No OpenAPI document: only the shipped rules classify failures."
    return (
        f"A starter config written by `mendpoint init --upstream {upstream}`.",
        origin,
        "Everything marked `review:` is a guess: read it before you roll out.",
        "  mendpoint check --config THIS_FILE      # validate",
        "  mendpoint test --config THIS_FILE FIXTURES_FILE",
        "  mendpoint serve --config THIS_FILE",
        "Then the loop: what no rule names yet, and drafts for it tried on real failures:",
        f"  mendpoint gaps --admin {DEFAULT_ADMIN} --token-file {TOKEN_FILE}",
        f"  mendpoint suggest --from {DEFAULT_ADMIN} --token-file {TOKEN_FILE}",
        "      --config THIS_FILE --out drafts.yaml",
        "and, once agents recover with the advisory headers, `mode: additive`.",
    )


def _include(config: Mapping, packs: list[str], probe: Probe | None, drafts: str | None) -> None:
    """The drafts file first (the rules the console saves match before any pack), then the
    packs guessed."""
    listed = [] if drafts is None else [drafts]
    if drafts is not None:
        config.note(f"{drafts}: the rules the console saves (console.drafts_file), first.")
    if not packs:
        config.note("No framework recognised; the shipped fallbacks classify every failure.")
    else:
        why = f" (probe of {probe.path}: {probe.evidence})" if probe and probe.evidence else ""
        config.note(f"review: packs guessed from the document and a probe of an unknown path{why}.")
    listed += [f"builtin:{p}" for p in packs]
    if listed:
        config.add("include", listed)


def _route(route: str, upstream: str, document: ApiDocument | None, loop: Loop) -> Mapping:
    capture = Mapping().add("dir", loop.captures).add("only", "unmatched")
    spec = (
        Mapping()
        .add("name", route)
        .add("prefix", "/")
        .add("upstream", upstream)
        .note("headers is shadow mode: the upstream's bodies untouched, advisory X-Error-*")
        .note("headers added. Move to additive (recovery fields added to its JSON errors) once")
        .note("`mendpoint gaps` shows nothing you have not named.")
        .add("mode", "headers")
        .note("The failures only a shipped fallback named, for `mendpoint suggest --from DIR`.")
        .add("capture", capture)
        .note("review: methods safe to repeat; a rule may call a failure retryable only on these.")
        .add("idempotent_methods", list(DEFAULT_IDEMPOTENT))
    )
    named = [op for op in document.operations if op.operation_id] if document else []
    if named:
        spec.note("The name `then_retry` gives each operation (its operationId).")
        operations = [
            {"method": op.method, "path": op.path, "name": op.operation_id} for op in named
        ]
        spec.add("operations", Sequence(operations))
    return spec


def _rule(rule: DraftRule, route: str) -> list[Any]:
    op, error = rule.operation, rule.error
    match = (
        Mapping()
        .add("routes", [route])
        .add("methods", [op.method])
        .add("status", [error.status])
        .add("path", path_glob(op.path))
    )
    if rule.stated is not None:
        regex_text = "^" + re.escape(rule.stated.value) + "$"
        match.add("json", {"path": rule.stated.json_path, "regex": regex_text})
    drafted = (
        Mapping()
        .add("code", Noted(rule.code, f"review: from {rule.code_source}"))
        .add("category", rule.category.value)
    )
    if rule.category in TRANSIENT:
        drafted.note(f"review: transient; {op.method} is idempotent, so the identical call may")
        drafted.note("be repeated after the delay.")
        drafted.add("retryable", True)
        drafted.add("retry_after_ms", {"header": "Retry-After", "default": 1000})
    elif rule.category in FIX_REQUIRED:
        drafted.note("review: caller-correctable; say what must change, more precisely if you")
        drafted.note("can (a fix_command needs a registry entry: see docs/rules.md).")
        drafted.add("fix_required", FIX_REQUIRED[rule.category])
    else:
        drafted.note("review: terminal (neither retryable nor fixable by the caller).")
    described = json.dumps(error.description, ensure_ascii=False)
    return [
        Comment(f"{op.method} {op.path} → {error.status} {described}"),
        Mapping().add("id", rule.id).add("match", match).add("error", drafted),
    ]


def _fixtures(rule: DraftRule) -> list[dict[str, Any]]:
    op, error = rule.operation, rule.error
    bodies = list(error.examples) or [None]
    cases = []
    for index, body in enumerate(bodies):
        response: dict[str, Any] = {"status": error.status}
        if body is None:
            response["body"] = ""
        elif isinstance(body, (dict, list)):
            response["json"] = body
        else:
            response["body"] = str(body)
        if error.content_type and body is not None:
            response["headers"] = {"Content-Type": error.content_type}
        suffix = f"-example-{index + 1}" if error.examples else "-no-example"
        cases.append(
            {
                "name": f"{rule.id}{suffix}",
                "request": {"method": op.method, "path": example_path(op.path)},
                "response": response,
                "expect": {"rule": rule.id, "code": rule.code, "category": rule.category.value},
            }
        )
    return cases
