"""The corpus files: one YAML file per HTTP stack (http/) and per MCP server (mcp/).

Each scenario carries the right first action for the weakest agent, written down before the
gateway's answer was seen, with its reason and the upstream's own words that `error.message`
should keep (docs/packs/corpus.md#how-a-scenario-is-scored). Placeholders in commands, paths
and bodies (`{port}`, `{tmp}`, `{python}` ...) are filled per run by `Places.fill`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

HERE = Path(__file__).resolve().parent
HTTP_DIR = HERE / "http"
MCP_DIR = HERE / "mcp"
STACKS_DIR = HERE / "stacks"
RECORDED = HERE / "recorded"
NODE_DIR = HERE / "node"
HELD_OUT_NODE_DIR = HERE / "held_out" / "node"
RANKED_NODE_DIR = HERE / "held_out" / "ranked"

Action = Literal["retry", "fix", "run_fix", "stop"]
Expect = Literal["success", "retry", "fix", "run_fix", "stop"]
ACTIONS: tuple[Action, ...] = ("retry", "fix", "run_fix", "stop")
HeldOut = Literal["first", "second", "ranked"]
"""The held-out sets, each scored apart (docs/packs/corpus.md#the-held-out-sets): `first` and
`second` were chosen by hand, `ranked` by a written rule from the registries' download ranks and
Debian's packages (tests/first_action/held_out/selection.md)."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RequestSpec(Strict):
    """One HTTP request; `accept` is the agent's Accept header (an API client asks for JSON)."""

    method: str = "GET"
    path: str = "/"
    headers: dict[str, str] = Field(default_factory=dict)
    json_body: Any = Field(default=None, alias="json")
    body: str | None = None
    body_bytes: int | None = Field(default=None, ge=1, description="a body of this many 'x'")
    accept: str = "application/json"

    @model_validator(mode="after")
    def one_body(self) -> RequestSpec:
        given = [self.json_body is not None, self.body is not None, self.body_bytes is not None]
        if sum(given) > 1:
            raise ValueError("give at most one of json, body, body_bytes")
        return self


class Expectation(Strict):
    """What the weakest agent should do first, and why; `words` must reach error.message."""

    expect: Expect
    reason: str = ""
    words: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def failures_say_why(self) -> Expectation:
        if self.expect != "success" and not self.reason:
            raise ValueError("a failure scenario needs its one-line reason")
        if self.expect == "success" and self.words:
            raise ValueError("a success scenario has no words to keep")
        if any(_PLACEHOLDER.search(word) for word in self.words):
            raise ValueError("words are the upstream's own text: no placeholders in them")
        return self


class HttpScenario(Expectation):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    request: RequestSpec
    setup: list[RequestSpec] = Field(default_factory=list)
    pause_s: float = Field(default=0, ge=0, le=10, description="wait after setup")


class ProcessSpec(Strict):
    """A process of a stack or service; `port` (a placeholder) is where it listens."""

    command: list[str]
    port: str | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    start_timeout_s: float = Field(default=30, gt=0, le=180)
    ready_path: str | None = Field(default=None, description="GET until it answers 2xx")


class HttpStack(Strict):
    name: str
    kind: Literal["python", "node", "ruby", "perl", "php", "go", "java", "server", "emulator"]
    source: str = Field(description="where the stack's error shapes come from")
    prepare: list[list[str]] = Field(default_factory=list, description="commands run first")
    templates: list[str] = Field(default_factory=list, description="files filled into {tmp}")
    processes: list[ProcessSpec]
    upstream: str = "http://127.0.0.1:{port}"
    held_out: HeldOut | None = Field(
        default=None,
        description="the held-out set the stack belongs to: recorded before the rules were "
        "changed for it, never tuned to, its figures reported apart "
        "(docs/packs/corpus.md#the-held-out-sets)",
    )
    scenarios: list[HttpScenario]

    @model_validator(mode="after")
    def unique_ids(self) -> HttpStack:
        _unique([s.id for s in self.scenarios], self.name)
        return self


class McpCall(Expectation):
    """A tools/call (`tool`, `arguments`) or any other JSON-RPC request (`method`, `params`)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    method: str | None = None
    params: dict[str, Any] | None = None
    timeout_s: float = Field(default=30, gt=0, le=120)

    @model_validator(mode="after")
    def tool_or_method(self) -> McpCall:
        if (self.tool is None) == (self.method is None):
            raise ValueError("give exactly one of tool and method")
        return self


class McpServer(Strict):
    name: str
    registry: Literal["pypi", "npm"]
    source: str = Field(description="where the server's error texts come from")
    transport: Literal["stdio", "http"] = "stdio"
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    services: list[ProcessSpec] = Field(default_factory=list)
    prepare: list[list[str]] = Field(default_factory=list, description="run once, first")
    reset: list[list[str]] = Field(default_factory=list, description="run before each run")
    port: str = "{port}"
    http_path: str = "/mcp"
    bridge: bool = Field(default=False, description="also run through a `command:` route")
    held_out: HeldOut | None = Field(
        default=None,
        description="the held-out set the server belongs to, scored apart "
        "(docs/packs/corpus.md#the-held-out-sets)",
    )
    start_timeout_s: float = Field(default=60, gt=0, le=180)
    calls: list[McpCall]

    @model_validator(mode="after")
    def unique_ids(self) -> McpServer:
        _unique([c.id for c in self.calls], self.name)
        return self


def _unique(ids: list[str], where: str) -> None:
    seen = {i for i in ids if ids.count(i) > 1}
    if seen:
        raise ValueError(f"{where}: scenario ids repeat: {sorted(seen)}")


def load_http_stacks(names: list[str] | None = None) -> list[HttpStack]:
    return [HttpStack.model_validate(_read(p)) for p in _files(HTTP_DIR, names)]


def load_mcp_servers(names: list[str] | None = None) -> list[McpServer]:
    return [McpServer.model_validate(_read(p)) for p in _files(MCP_DIR, names)]


def _files(folder: Path, names: list[str] | None) -> list[Path]:
    files = sorted(folder.glob("*.yaml"))
    if names:
        files = [f for f in files if f.stem in names]
    return files


def _read(path: Path) -> Any:
    try:
        return yaml.load(path.read_text("utf-8"), Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: {exc}") from exc


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where built: 10x faster

_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True)
class Places:
    """The values placeholders stand for in one run of a stack or server."""

    values: dict[str, str]

    def fill(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.values:
                raise KeyError(f"unknown placeholder {{{name}}} in {text!r}")
            return self.values[name]

        return _PLACEHOLDER.sub(one, text)

    def fill_all(self, items: list[str]) -> list[str]:
        return [self.fill(item) for item in items]

    def fill_json(self, value: Any) -> Any:
        """Placeholders inside a JSON value's strings (arguments, bodies)."""
        if isinstance(value, str):
            return self.fill(value)
        if isinstance(value, list):
            return [self.fill_json(item) for item in value]
        if isinstance(value, dict):
            return {key: self.fill_json(item) for key, item in value.items()}
        return value
