"""Rule conditions as data: a class per `match:` key that tests an exchange, and their table.

A rule's `match:` holds two sorts of key:

- *index facts*, `status`, `transport`, `mcp` (written at all, and its `is_error`) and the
  literal first segment of `path`: they decide which observations a rule is tried on at all.
  The engine files each rule under them once, at load (`rules.INDEX_KEYS`, `engine.py`), so a
  failure meets only the rules that could match it and a rule costs nothing on the others.
- *conditions*, everything else: tested on each observation the rule is tried on. Each is
  one class here, with the `match:` key it comes from (`key`), how it is built from the
  validated `MatchSpec` (`build`: none, one, or one per entry, as for `headers:` and `json:`),
  its test (named captures, or None), why it failed (`reason`, for `why_not`), the response
  headers it reads (`headers_read`, for the answer cache) and, where it can only ever hold on
  some kinds of observation, which (`only_on`: the engine then never tries the rule on the
  others).

`path` is both: its glob is a condition, its first segment an index fact.

`CONDITIONS` is the one place a condition is added (with its field on `MatchSpec`, which
users write): a rule's conditions are built from it in its order, and `CompiledRule.matches`,
`unconditional`, `headers_read` and `why_not` all read the rule's tuple of them;
`tests/classify/test_conditions.py` holds `CONDITIONS` and `MatchSpec` to the same keys
(CONTRIBUTING.md#adding-a-rule-condition).

The data path calls `test` on every failure, so a test allocates nothing when it holds
without captures (`NO_CAPTURES`) and its arguments are the observation and two floats, no
context object: what a condition needs besides (its rule's id, for the timeout's log line)
it holds from load.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Self

from gateway.classify.argument_text import (
    echoed_argument,
    echoed_value,
    named_argument,
    only_argument,
    path_values,
    query_values,
)
from gateway.classify.observation import Observation, ObservationKind
from gateway.classify.timed_search import Captures, may_name_groups, named, timed_search
from gateway.config.jsonpath import JsonPath, parse_json_path
from gateway.config.patterns import Pattern, compile_glob, compile_regex
from gateway.config.rule_model import MatchSpec

NO_CAPTURES: Mapping[str, str] = MappingProxyType({})
"""What a condition that holds without naming anything returns: shared, never a new dict."""


class Condition(ABC):
    """One compiled condition of one rule."""

    __slots__ = ()
    key: ClassVar[str]
    """The `match:` key it comes from (`mcp.tool` for `tool:` under `mcp:`)."""
    only_on: ClassVar[frozenset[ObservationKind] | None] = None
    """The kinds of observation it can hold on, when not all of them."""

    @classmethod
    @abstractmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        """The conditions `match` writes under `key`: none when it does not write it."""

    @abstractmethod
    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        """Named captures when it holds (`NO_CAPTURES` for none), else None; regexes run
        under `timeout` each and stop at `deadline` (`timed_search`)."""

    @abstractmethod
    def reason(self, obs: Observation) -> str:
        """Why it does not hold on `obs`, as `explain` and the console say it."""

    @property
    def headers_read(self) -> tuple[str, ...]:
        """The response headers its test reads (the answer cache keys on them)."""
        return ()


@dataclass(frozen=True, slots=True)
class Routes(Condition):
    key: ClassVar[str] = "routes"
    names: frozenset[str]

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        return () if match.routes is None else (cls(frozenset(match.routes)),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        return NO_CAPTURES if obs.route in self.names else None

    def reason(self, obs: Observation) -> str:
        return f"route {obs.route} is not one of {', '.join(sorted(self.names))}"


@dataclass(frozen=True, slots=True)
class Methods(Condition):
    key: ClassVar[str] = "methods"
    names: frozenset[str]

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        return () if match.methods is None else (cls(frozenset(match.methods)),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        return NO_CAPTURES if obs.method in self.names else None

    def reason(self, obs: Observation) -> str:
        return f"method {obs.method} is not one of {', '.join(sorted(self.names))}"


@dataclass(frozen=True, slots=True)
class PathGlob(Condition):
    key: ClassVar[str] = "path"
    glob: Pattern

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        return () if match.path is None else (cls(compile_glob(match.path)),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        return NO_CAPTURES if self.glob.match(obs.path) else None

    def reason(self, obs: Observation) -> str:
        return f"path {obs.path} does not match its glob"


@dataclass(frozen=True, slots=True)
class Tool(Condition):
    key: ClassVar[str] = "mcp.tool"
    glob: Pattern

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        tool = match.mcp.tool if match.mcp else None
        return (cls(compile_glob(tool, "")),) if tool else ()

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        tool = obs.tool
        return NO_CAPTURES if tool is not None and self.glob.match(tool) else None

    def reason(self, obs: Observation) -> str:
        return "tool does not match"


@dataclass(frozen=True, slots=True)
class JsonRpcCode(Condition):
    key: ClassVar[str] = "mcp.jsonrpc_code"
    only_on: ClassVar[frozenset[ObservationKind] | None] = frozenset(
        {ObservationKind.JSONRPC_ERROR}
    )
    """A tool error carries no code: such a rule is never tried on one."""
    code: int

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        code = match.mcp.jsonrpc_code if match.mcp else None
        return () if code is None else (cls(code),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        return NO_CAPTURES if obs.jsonrpc_code == self.code else None

    def reason(self, obs: Observation) -> str:
        return "jsonrpc_code does not match"


@dataclass(frozen=True, slots=True)
class Idempotent(Condition):
    key: ClassVar[str] = "idempotent"
    replay_safe: bool

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        return () if match.idempotent is None else (cls(match.idempotent),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        return NO_CAPTURES if obs.replay_safe == self.replay_safe else None

    def reason(self, obs: Observation) -> str:
        return f"the request is {'' if obs.replay_safe else 'not '}safe to replay"


@dataclass(frozen=True, slots=True)
class MissingRequired(Condition):
    """`{missing}` names the arguments left out, when the rule asks for some."""

    key: ClassVar[str] = "mcp.missing_required"
    left_out: bool

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        wanted = match.mcp.missing_required if match.mcp else None
        return () if wanted is None else (cls(wanted),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        missing = obs.missing_arguments
        if bool(missing) != self.left_out:
            return None
        return {"missing": ", ".join(missing)} if self.left_out else NO_CAPTURES

    def reason(self, obs: Observation) -> str:
        left_out = "left out" if obs.missing_arguments else "did not leave out"
        return f"the call {left_out} a required argument"


_NOT_ABOUT_AN_ARGUMENT = {
    "named": "the message names no argument of the call",
    "echoed": "the message repeats no value the call sent",
    "only": "the message is not only a value the call sent",
}


@dataclass(frozen=True, slots=True)
class ArgumentNamed(Condition):
    """`{argument}` names the argument of the call the failure's text is about, read in
    the message behind the SDK's wrapping (gateway.classify.argument_text)."""

    key: ClassVar[str] = "mcp.argument"
    how: str

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        how = match.mcp.argument if match.mcp else None
        return () if how is None else (cls(how),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        text = obs.inner_text or obs.text
        if text is None or not (obs.arguments or obs.argument_values):
            return None
        if self.how == "named":
            name = named_argument(text, obs.arguments, obs.argument_values)
        elif self.how == "echoed":
            name = echoed_argument(text, obs.argument_values)
        else:
            name = only_argument(text, obs.argument_values)
        return None if name is None else {"argument": name}

    def reason(self, obs: Observation) -> str:
        return _NOT_ABOUT_AN_ARGUMENT[self.how]


@dataclass(frozen=True, slots=True)
class CredentialArgument(Condition):
    """`{credential}` names the tool's arguments that carry a credential, when it has some."""

    key: ClassVar[str] = "mcp.credential_argument"
    takes_one: bool

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        wanted = match.mcp.credential_argument if match.mcp else None
        return () if wanted is None else (cls(wanted),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        names = obs.credential_arguments
        if bool(names) != self.takes_one:
            return None
        return {"credential": ", ".join(names)} if names else NO_CAPTURES

    def reason(self, obs: Observation) -> str:
        takes = "takes" if obs.credential_arguments else "takes no"
        return f"the tool {takes} credential as an argument"


@dataclass(frozen=True, slots=True)
class HeaderValue(Condition):
    """One entry of `headers:`: the header is present and its value matches; its regex's
    named groups are captures."""

    key: ClassVar[str] = "headers"
    name: str
    pattern: Pattern
    rule_id: str
    names_groups: bool
    """The pattern may name groups: a match is read for captures only then (most header
    tests are a bare word or flags and alternatives)."""

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        return tuple(
            cls(name, compile_regex(p), rule_id, may_name_groups(p))
            for name, p in (match.headers or {}).items()
        )

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        value = obs.headers.get(self.name)
        if value is None:
            return None
        found = timed_search(self.pattern, value, timeout, self.rule_id, deadline, obs)
        if found is None:
            return None
        return named(found) if self.names_groups else NO_CAPTURES

    def reason(self, obs: Observation) -> str:
        return f"header {self.name} is absent or does not match"

    @property
    def headers_read(self) -> tuple[str, ...]:
        return (self.name,)


@dataclass(frozen=True, slots=True)
class JsonValue(Condition):
    """One `json:` condition: a path, and what a value reached there must satisfy (with
    wildcards in the path, any value reached may; the first that does names the captures)."""

    key: ClassVar[str] = "json"
    path: JsonPath
    regex: Pattern | None
    equals: Any
    rule_id: str

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        return tuple(
            cls(
                parse_json_path(spec.path),
                compile_regex(spec.regex) if spec.regex else None,
                spec.equals,
                rule_id,
            )
            for spec in match.json_conditions
        )

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        body = obs.json
        if self.path.literal:
            value = self.path.get(body)
            if value is None:
                return None
            return self._value(value, {}, obs, timeout, deadline)
        for value, bound in self.path.find(body):
            found = self._value(value, bound, obs, timeout, deadline)
            if found is not None:
                return found
        return None

    def _value(
        self, value: Any, bound: Captures, obs: Observation, timeout: float, deadline: float
    ) -> Captures | None:
        if self.equals is not None and value != self.equals:
            return None
        if self.regex is None:
            return dict(bound)
        text = value if isinstance(value, str) else _scalar_text(value)
        if text is None:
            return None
        found = timed_search(self.regex, text, timeout, self.rule_id, deadline, obs)
        return None if found is None else {**bound, **named(found)}

    def reason(self, obs: Observation) -> str:
        return f"json {self.path.text}: no value there matches"


@dataclass(frozen=True, slots=True)
class BodyText(Condition):
    """`body:`, a regex over the body's text; its named groups are captures."""

    key: ClassVar[str] = "body"
    pattern: Pattern
    rule_id: str

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        return () if match.body is None else (cls(compile_regex(match.body), rule_id),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        """The text as sent, then, for an MCP failure its SDK wrapped, the message inside
        (docs/rules.md#the-sdks-wrapping): a rule anchored at the start of a message finds
        it behind `Error executing tool NAME: ` as where nothing wraps it."""
        text = obs.text
        found = None
        if text is not None:
            found = timed_search(self.pattern, text, timeout, self.rule_id, deadline, obs)
        if found is None and (obs.tool is not None or obs.jsonrpc_code is not None):
            inner = obs.inner_text
            if inner is not None:
                found = timed_search(self.pattern, inner, timeout, self.rule_id, deadline, obs)
        return None if found is None else named(found)

    def reason(self, obs: Observation) -> str:
        return "the body does not match its pattern"


@dataclass(frozen=True, slots=True)
class RequestEchoed(Condition):
    """`request_echoed:`: an HTTP failure's text repeats a value the URL sent (`{parameter}`,
    a query parameter or `path segment N`), as a page quoting `For input string: "abc"`."""

    key: ClassVar[str] = "request_echoed"
    only_on: ClassVar[frozenset[ObservationKind] | None] = frozenset({ObservationKind.STATUS})
    wanted: bool

    @classmethod
    def build(cls, match: MatchSpec, rule_id: str) -> tuple[Self, ...]:
        return () if match.request_echoed is None else (cls(match.request_echoed),)

    def test(self, obs: Observation, timeout: float, deadline: float) -> Mapping[str, str] | None:
        name = echoed_value(obs.text or "", path_values(obs.path), query_values(obs.query))
        if self.wanted:
            return None if name is None else {"parameter": name}
        return NO_CAPTURES if name is None else None

    def reason(self, obs: Observation) -> str:
        repeats = "repeats no" if self.wanted else "repeats a"
        return f"the body {repeats} value the request sent in its path or query"


CONDITIONS: tuple[type[Condition], ...] = (
    Routes,
    Methods,
    PathGlob,
    Tool,
    JsonRpcCode,
    Idempotent,
    MissingRequired,
    CredentialArgument,
    HeaderValue,
    JsonValue,
    BodyText,
    RequestEchoed,
    ArgumentNamed,
)
"""Every kind of condition, in the order a rule tests them (and `why_not` lists them): the
cheap ones first (a set, a glob, a number), the searches of headers, JSON and body last, and
last of all the reading of the text for the call's arguments (a rule's body test says first
whether its words are there at all)."""


def build_conditions(match: MatchSpec, rule_id: str) -> tuple[Condition, ...]:
    """The conditions `match` writes, in `CONDITIONS` order."""
    return tuple(c for kind in CONDITIONS for c in kind.build(match, rule_id))


def _scalar_text(value: Any) -> str | None:
    """A number or boolean as the text a regex reads (`true`, `42`); None for others."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


__all__ = ["CONDITIONS", "NO_CAPTURES", "Condition", "build_conditions"]
