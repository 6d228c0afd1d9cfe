"""Whole-config checks that a single pydantic model cannot make.

Takes a `LoadedConfig` whose files each parsed and returns every `Problem`, located by file
and line: registry references and command safety, the class invariants (docs/spec.md), regexes
that do not compile, placeholders with no capture to fill them, duplicate ids, route names.
"""

from __future__ import annotations

import regex

from gateway.config.errors import Problem
from gateway.config.jsonpath import parse_json_path
from gateway.config.loaded import BUILTIN_PREFIX, LoadedConfig, Sourced
from gateway.config.patterns import compile_regex, parse_status, placeholders
from gateway.config.registry import command_problems
from gateway.config.rule_model import RetryAfterSpec, RuleSpec

NON_IDEMPOTENT = frozenset({"POST", "PATCH"})
BUILTIN_PLACEHOLDERS = frozenset({"status", "method", "path"})


def validate_loaded(loaded: LoadedConfig) -> list[Problem]:
    problems: list[Problem] = []
    problems.extend(_route_problems(loaded))
    problems.extend(_command_problems(loaded))
    problems.extend(_catalog_problems(loaded))
    problems.extend(_caller_problems(loaded))
    route_names = {route.name for route in loaded.config.routes}
    first_seen: dict[str, Sourced] = {}
    for rule in loaded.rules:

        def report(
            field: tuple[str | int, ...], message: str, source: Sourced = rule.source
        ) -> None:
            dotted = f"rules[{source.path[1]}]" + "".join(
                f"[{p}]" if isinstance(p, int) else f".{p}" for p in field
            )
            problems.append(Problem(source.file, loaded.line_of(source, *field), dotted, message))

        previous = first_seen.setdefault(rule.spec.id, rule.source)
        if previous is not rule.source and rule.source.file.startswith(BUILTIN_PREFIX):
            # Point at the user's rule, not at a shipped file they cannot edit.
            report(
                ("id",),
                f"rule id {rule.spec.id!r} is taken by the shipped rule at "
                f"{rule.source.file}:{rule.source.line}; choose another id",
                previous,
            )
        elif previous is not rule.source:
            report(
                ("id",),
                f"duplicate rule id {rule.spec.id!r} (first at {previous.file}:{previous.line})",
            )
        if rule.source.file.startswith(BUILTIN_PREFIX) and self_contained(rule.spec):
            continue  # the same problems in every config: none (tests/config/test_shipped_rules)
        for field, message in rule_problems(rule.spec, set(loaded.commands), route_names):
            report(field, message)
    return problems


def self_contained(rule: RuleSpec) -> bool:
    """Whether a rule's problems depend on the rule alone: it names no route and no command.

    A shipped rule that is has the same problems in every config, and the suite proves them
    none, so no load checks it again: checking compiled its regexes, about 45 ms of CPU on
    every start, most of them for rules that process never reaches (they compile when first
    searched, `patterns.PrefilteredPattern`). A shipped rule that names a route or a command
    is checked at every load, as a user's rule is.
    """
    return rule.match.routes is None and rule.error.fix_command is None


def _route_problems(loaded: LoadedConfig) -> list[Problem]:
    problems: list[Problem] = []
    doc = loaded.docs.get(loaded.source)
    names: set[str] = set()
    prefixes: dict[str, str] = {}
    for index, route in enumerate(loaded.config.routes):
        at = ("routes", index)
        if route.name in names:
            problems.append(
                Problem(
                    loaded.source,
                    doc.line_of((*at, "name")) if doc else None,
                    f"routes[{index}].name",
                    f"duplicate route name {route.name!r}",
                )
            )
        # Prefixes match whatever the case and a trailing slash (docs/configuration.md#paths)
        key = (route.prefix.rstrip("/") or "/").lower()
        if key in prefixes:
            same = prefixes[key]
            problems.append(
                Problem(
                    loaded.source,
                    doc.line_of((*at, "prefix")) if doc else None,
                    f"routes[{index}].prefix",
                    f"another route already has prefix {same!r}"
                    + (
                        ""
                        if same == route.prefix
                        else f" ({route.prefix!r} matches the same paths: case and a "
                        "trailing slash do not count)"
                    ),
                )
            )
        names.add(route.name)
        prefixes.setdefault(key, route.prefix)
    return problems


def _catalog_problems(loaded: LoadedConfig) -> list[Problem]:
    """A policy may only allow skills that exist and declare the intent it names."""
    problems: list[Problem] = []
    skills = {skill.name: skill for skill in loaded.skills}
    for policy, source in zip(loaded.policies, loaded.policy_sources, strict=True):
        for index, name in enumerate(policy.allow.skills):
            skill = skills.get(name)
            if skill is None:
                message = f"no skill is named {name!r}"
            elif policy.allow.intent not in skill.recovers:
                message = f"skill {name!r} does not declare intent {policy.allow.intent!r}"
            else:
                continue
            line = loaded.line_of(source, "allow", "skills", index)
            field = f"policies[{source.path[1]}].allow.skills[{index}]"
            problems.append(Problem(source.file, line, field, message))
    return problems


def _caller_problems(loaded: LoadedConfig) -> list[Problem]:
    callers = loaded.config.callers
    if callers is None:
        return []
    doc = loaded.docs.get(loaded.source)
    problems: list[Problem] = []
    seen_names: set[str] = set()
    seen_keys: set[str] = set()
    for index, key in enumerate(callers.keys):
        if key.name in seen_names or key.key in seen_keys:
            line = doc.line_of(("callers", "keys", index)) if doc else None
            problems.append(
                Problem(
                    loaded.source,
                    line,
                    f"callers.keys[{index}]",
                    "caller name or key hash already defined",
                )
            )
        seen_names.add(key.name)
        seen_keys.add(key.key)
    if callers.source == "trusted_header" and not loaded.config.trusted_proxies:
        line = doc.line_of(("callers", "source")) if doc else None
        problems.append(
            Problem(
                loaded.source,
                line,
                "callers.source",
                "trusted_header believes the caller header only from trusted_proxies, which "
                "is empty, so every caller would be anonymous: list the address of the auth "
                "layer that sets the header under trusted_proxies (docs/security.md)",
            )
        )
    if callers.source == "trusted_header" and callers.keys:
        line = doc.line_of(("callers", "keys")) if doc else None
        problems.append(
            Problem(
                loaded.source,
                line,
                "callers.keys",
                "API keys are only used "
                "with source: api_key; name trusted callers under principals",
            )
        )
    return problems


def _command_problems(loaded: LoadedConfig) -> list[Problem]:
    problems: list[Problem] = []
    for command_id, command in loaded.commands.items():
        line = loaded.line_of(command.source, "run")
        for message in command_problems(command_id, command.spec, loaded.companions):
            problems.append(Problem(command.source.file, line, f"commands.{command_id}", message))
    return problems


def rule_problems(
    rule: RuleSpec, command_ids: set[str], route_names: set[str]
) -> list[tuple[tuple[str | int, ...], str]]:
    """Every problem of one rule, as (field path inside the rule, message)."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    match, error = rule.match, rule.error
    captures: set[str] = set(BUILTIN_PLACEHOLDERS)
    for field, pattern in _regexes(rule):
        try:
            captures.update(compile_regex(pattern).groupindex)
        except regex.error as exc:
            out.append((field, f"invalid regex {pattern!r}: {exc}"))
    for condition in match.json_conditions:  # paths parsed already when the model validated
        captures.update(parse_json_path(condition.path).names)
    if error.fields is not None:
        captures.add("fields")
    if match.mcp is not None and match.mcp.missing_required:
        captures.add("missing")
    if match.mcp is not None and match.mcp.argument is not None:
        captures.add("argument")
    if match.mcp is not None and match.mcp.credential_argument:
        captures.add("credential")
    if match.request_echoed:
        captures.add("parameter")
    for index, status in enumerate(match.status or []):
        try:
            parse_status(status)
        except ValueError as exc:
            out.append((("match", "status", index), str(exc)))
    if match.transport is not None and (match.status or match.json_ or match.body or match.mcp):
        out.append(
            (
                ("match", "transport"),
                "a transport rule matches failures with no response:"
                " it cannot also match status, body, json or mcp",
            )
        )
    if match.json_ is not None and match.body is not None:
        out.append((("match", "body"), "give either body or json, not both"))
    for index, name in enumerate(match.routes or []):
        if name not in route_names:
            out.append((("match", "routes", index), f"no route is named {name!r}"))
    for field_name in ("message", "fix_required", "suggestion"):
        template = getattr(error, field_name)
        if template is None:
            continue
        try:
            names = placeholders(template)
        except ValueError as exc:
            out.append((("error", field_name), str(exc)))
            continue
        missing = sorted(names - captures)
        if missing:
            out.append(
                (
                    ("error", field_name),
                    f"placeholder(s) {missing} match no named capture "
                    f"of this rule's regexes or json paths (or status, method, path, "
                    f"and fields when the rule has fields:)",
                )
            )
    retry_capture = (
        error.retry_after_ms.capture if isinstance(error.retry_after_ms, RetryAfterSpec) else None
    )
    if retry_capture is not None and retry_capture not in captures - BUILTIN_PLACEHOLDERS:
        out.append(
            (
                ("error", "retry_after_ms", "capture"),
                f"{retry_capture!r} is not a named capture of this rule's regexes",
            )
        )
    out.extend(_class_problems(rule))
    out.extend(_success_reading_problems(rule))
    if error.fix_command is not None and error.fix_command not in command_ids:
        known = ", ".join(sorted(command_ids)) or "none"
        out.append(
            (
                ("error", "fix_command"),
                f"{error.fix_command!r} is not a registry id "
                f"(commands: {known}); fix_command names a `commands:` entry, never a "
                f"command line",
            )
        )
    return out


def _regexes(rule: RuleSpec) -> list[tuple[tuple[str | int, ...], str]]:
    match = rule.match
    found: list[tuple[tuple[str | int, ...], str]] = []
    if match.body is not None:
        found.append((("match", "body"), match.body))
    listed = isinstance(match.json_, list)
    for index, condition in enumerate(match.json_conditions):
        if condition.regex is not None:
            at: tuple[str | int, ...] = ("match", "json", index) if listed else ("match", "json")
            found.append(((*at, "regex"), condition.regex))
    for name, pattern in (match.headers or {}).items():
        found.append((("match", "headers", name), pattern))
    return found


def _success_reading_problems(rule: RuleSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """A rule that reads successes names its tools and the words that make one a failure:
    every other success must pass untouched (docs/rules.md#failures-reported-as-successes)."""
    mcp = rule.match.mcp
    if mcp is None or mcp.is_error:
        return []
    out: list[tuple[tuple[str | int, ...], str]] = []
    if mcp.tool is None or mcp.tool.strip("*") == "":
        out.append((("match", "mcp", "tool"), "is_error: false needs the tool(s) it is for"))
    if rule.match.body is None:
        out.append((("match", "body"), "is_error: false needs the body words of a failure"))
    if mcp.jsonrpc_code is not None:
        out.append((("match", "mcp", "jsonrpc_code"), "a success has no JSON-RPC error code"))
    return out


def _class_problems(rule: RuleSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Every failure is transient, caller-correctable or terminal, never a mix (docs/spec.md)."""
    error = rule.error
    out: list[tuple[tuple[str | int, ...], str]] = []
    if error.retryable and (error.fix_required or error.fix_command):
        out.append(
            (
                ("error", "retryable"),
                "a retryable failure has no fix fields: if the "
                "caller must change something first it is caller-correctable, "
                "retryable: false",
            )
        )
    if error.fix_command is not None and error.fix_required is None:
        out.append(
            (
                ("error", "fix_command"),
                "fix_command without fix_required: state the condition the command changes",
            )
        )
    if error.retry_after_ms is not None and not error.retryable:
        out.append((("error", "retry_after_ms"), "retry_after_ms is only for retryable: true"))
    if error.retryable and not error.side_effect_free and _may_match_after_send(rule):
        out.append(
            (
                ("error", "retryable"),
                "this rule can match a POST or PATCH after the "
                "request may have reached the upstream; restrict match.methods to "
                "idempotent methods or state side_effect_free: true",
            )
        )
    return out


def _may_match_after_send(rule: RuleSpec) -> bool:
    match = rule.match
    if match.idempotent:
        return False  # only requests that may be repeated: idempotent, or with a key
    methods = set(match.methods) if match.methods is not None else NON_IDEMPOTENT
    if not methods & NON_IDEMPOTENT:
        return False
    if match.transport is None:
        return True  # any HTTP response, or an MCP error: the request was received
    return any(not kind.request_unsent for kind in match.transport) or bool(
        match.status or match.mcp
    )
