"""One rule compiled into cheap matchers, and its test against an `Observation`.

Patterns are compiled once at load; a match returns the named captures that fill the rule's
templates. Regexes run with a timeout on input already capped by the proxy, so a
pathological pattern or body costs a bounded amount of time and simply does not match.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from gateway.classify.fields import FieldSource
from gateway.classify.observation import Observation
from gateway.classify.retry_hints import HINT_HEADERS
from gateway.config.jsonpath import JsonPath, parse_json_path
from gateway.config.loaded import SourcedRule
from gateway.config.patterns import (
    LiteralPattern,
    Pattern,
    PrefilteredPattern,
    compile_glob,
    compile_regex,
    parse_status,
)
from gateway.config.rule_model import ErrorSpec, JsonMatch, RetryAfterSpec
from gateway.failure import TransportKind

log = logging.getLogger("mendpoint.classify")

Captures = dict[str, str]


@dataclass(frozen=True, slots=True)
class JsonCondition:
    """One compiled `json:` condition: a path and what a value reached there must satisfy."""

    path: JsonPath
    regex: Pattern | None
    equals: Any

    def first_match(
        self, body: Any, timeout: float, rule_id: str, deadline: float, obs: Observation
    ) -> Captures | None:
        """Captures of the first value that satisfies the condition (wildcards: any value)."""
        if self.path.literal:
            value = self.path.get(body)
            if value is None:
                return None
            return self._test(value, {}, timeout, rule_id, deadline, obs)
        for value, bound in self.path.find(body):
            found = self._test(value, bound, timeout, rule_id, deadline, obs)
            if found is not None:
                return found
        return None

    def _test(
        self,
        value: Any,
        bound: Captures,
        timeout: float,
        rule_id: str,
        deadline: float,
        obs: Observation,
    ) -> Captures | None:
        if self.equals is not None and value != self.equals:
            return None
        if self.regex is None:
            return dict(bound)
        text = value if isinstance(value, str) else _scalar_text(value)
        found = None if text is None else _search(self.regex, text, timeout, rule_id, deadline, obs)
        return None if found is None else {**bound, **_named(found)}


@dataclass(frozen=True, slots=True)
class CompiledRule:
    id: str
    order: int
    is_default: bool
    origin: str
    error: ErrorSpec
    statuses: tuple[tuple[int, int], ...] | None
    transports: frozenset[TransportKind] | None
    is_mcp: bool
    routes: frozenset[str] | None
    methods: frozenset[str] | None
    path: Pattern | None
    path_segment: str | None  # the glob's literal first segment, for the engine's index
    headers: tuple[tuple[str, Pattern], ...]
    json: tuple[JsonCondition, ...]
    body: Pattern | None
    tool: Pattern | None
    jsonrpc_code: int | None
    idempotent: bool | None = None
    reads_successes: bool = False
    """`match.mcp.is_error: false`: tried on results reported as successes, and only there."""
    missing_required: bool | None = None
    """`match.mcp.missing_required`: the call left out a required argument (or did not)."""
    fields: tuple[FieldSource, ...] = ()

    @property
    def unconditional(self) -> bool:
        """True when status/transport alone decide: no rule after it can ever be reached."""
        return (
            self.routes is None
            and self.methods is None
            and self.path is None
            and not self.headers
            and not self.json
            and self.body is None
            and self.tool is None
            and self.jsonrpc_code is None
            and self.idempotent is None
            and self.missing_required is None
        )

    @property
    def headers_read(self) -> tuple[str, ...]:
        """Every response header this rule's match or failure may read (for the answer cache)."""
        names = [name for name, _ in self.headers]
        retry = self.error.retry_after_ms
        if isinstance(retry, RetryAfterSpec):
            names.extend(n for n in (retry.header,) if n is not None)
            names.extend(HINT_HEADERS if retry.hints else ())
        return tuple(names)

    def matches(
        self, obs: Observation, regex_timeout_s: float, deadline: float = math.inf
    ) -> Captures | None:
        """Named captures when every condition holds, else None (`deadline`: see `_search`)."""
        if self.routes is not None and obs.route not in self.routes:
            return None
        if self.methods is not None and obs.method not in self.methods:
            return None
        if self.path is not None and not self.path.match(obs.path):
            return None
        if self.tool is not None and (obs.tool is None or not self.tool.match(obs.tool)):
            return None
        if self.jsonrpc_code is not None and obs.jsonrpc_code != self.jsonrpc_code:
            return None
        if self.idempotent is not None and obs.replay_safe != self.idempotent:
            return None
        if (
            self.missing_required is not None
            and bool(obs.missing_arguments) != self.missing_required
        ):
            return None
        for name, pattern in self.headers:
            value = obs.headers.get(name)
            found = (
                None
                if value is None
                else _search(pattern, value, regex_timeout_s, self.id, deadline, obs)
            )
            if found is None:
                return None
        captures: Captures = {}
        if self.missing_required:
            captures["missing"] = ", ".join(obs.missing_arguments)
        if self.json:
            body = obs.json
            for condition in self.json:
                found = condition.first_match(body, regex_timeout_s, self.id, deadline, obs)
                if found is None:
                    return None
                captures.update(found)
        if self.body is not None:
            found = self._body_match(self.body, obs, regex_timeout_s, deadline)
            if found is None:
                return None
            captures.update(_named(found))
        return captures

    def _body_match(self, body: Pattern, obs: Observation, timeout: float, deadline: float) -> Any:
        """The body test on the text as sent, then, for an MCP failure its SDK wrapped, on
        the message inside (docs/rules.md#the-sdks-wrapping): a rule anchored at the start
        of a message finds it behind `Error executing tool NAME: ` as where nothing wraps it.
        """
        text = obs.text
        found = None if text is None else _search(body, text, timeout, self.id, deadline, obs)
        if found is None and (obs.tool is not None or obs.jsonrpc_code is not None):
            inner = obs.inner_text
            if inner is not None:
                found = _search(body, inner, timeout, self.id, deadline, obs)
        return found


def compile_rule(sourced: SourcedRule, order: int) -> CompiledRule:
    """Compile a validated rule; validation has already proven every pattern compiles."""
    spec, match = sourced.spec, sourced.spec.match
    return CompiledRule(
        id=spec.id,
        order=order,
        is_default=sourced.is_default,
        origin=f"{sourced.source.file}:{sourced.source.line}",
        error=spec.error,
        statuses=tuple(parse_status(s) for s in match.status) if match.status else None,
        transports=frozenset(match.transport) if match.transport is not None else None,
        is_mcp=match.mcp is not None,
        routes=frozenset(match.routes) if match.routes is not None else None,
        methods=frozenset(match.methods) if match.methods is not None else None,
        path=compile_glob(match.path) if match.path is not None else None,
        path_segment=literal_first_segment(match.path),
        headers=tuple((n, compile_regex(p)) for n, p in (match.headers or {}).items()),
        json=tuple(_json_condition(c) for c in match.json_conditions),
        body=compile_regex(match.body) if match.body is not None else None,
        tool=compile_glob(match.mcp.tool, "") if match.mcp and match.mcp.tool else None,
        jsonrpc_code=match.mcp.jsonrpc_code if match.mcp else None,
        reads_successes=match.mcp is not None and not match.mcp.is_error,
        missing_required=match.mcp.missing_required if match.mcp else None,
        idempotent=match.idempotent,
        fields=tuple(FieldSource.compile(f) for f in spec.error.fields_specs),
    )


def _json_condition(spec: JsonMatch) -> JsonCondition:
    return JsonCondition(
        path=parse_json_path(spec.path),
        regex=compile_regex(spec.regex) if spec.regex else None,
        equals=spec.equals,
    )


class ClassifyTimeout(TimeoutError):
    """The whole classification ran past its wall-clock deadline: the caller fails open."""


def literal_first_segment(glob: str | None) -> str | None:
    """`/v1/orders/**` → `v1`: every path the glob matches starts with `/v1/` or is `/v1`.

    None when the first segment holds a wildcard (or there is no glob): such a rule can
    match under any first segment.
    """
    if glob is None or not glob.startswith("/"):
        return None
    segment = glob[1:].partition("/")[0]
    if not segment or "*" in segment or "?" in segment:
        return None
    return segment


def _search(
    pattern: Pattern, text: str, timeout: float, rule_id: str, deadline: float, obs: Observation
) -> Any:
    """`pattern.search` under the per-regex timeout and the classification's deadline.

    The `regex` module's timeout counts process CPU time, not wall time: on a loaded host a
    50 ms timeout took over a second of wall time, and with many rules those add up while the
    event loop is blocked. So each search also gets at most what is left of the wall-clock
    deadline, and none starts once it has passed. A search that times out is marked on `obs`
    (`regex_gave_up`): the verdict is then not one an unhurried search gives, and the answer
    cache keeps none such.
    """
    if isinstance(pattern, LiteralPattern):
        # A substring test (most header tests) costs next to nothing: it neither needs a
        # timeout nor gives up a classification whose budget an earlier regex used up.
        return pattern.search(text)
    if isinstance(pattern, PrefilteredPattern) and not pattern.may_match(text):
        return None  # none of the words every match holds: it cannot match, nor time out
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ClassifyTimeout(f"classification deadline passed before rule {rule_id}")
    limit = min(timeout, remaining)
    try:
        searched = pattern.compiled if isinstance(pattern, PrefilteredPattern) else pattern
        return searched.search(text, timeout=limit)
    except TimeoutError:
        obs.regex_gave_up = True
        log.warning(
            "regex of rule %s timed out after %.0f ms; treated as no match", rule_id, limit * 1000
        )
        return None


def _named(found: Any) -> Captures:
    return {k: v for k, v in found.groupdict().items() if v is not None}


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None
