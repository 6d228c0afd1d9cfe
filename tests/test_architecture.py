"""The shape of the package: imports point one way and never go round in a circle.

The layers are the packages, low to high, in the order a request meets them: vocabulary
(`failure`, `header_names`, `fence/`) → `text/`, `telemetry/` → `config/` → `classify/`,
`resolve/` → `feedback/` → `enrich/` → the transports `proxy/`, `mcp/` → `offline/` → `serve/` →
`cli/`. A module may import its own layer or lower ones, never a higher one.

The import graph is module to module over gateway/: `from gateway.x import y` is an edge to the
module `gateway.x.y` when that is a module and to `gateway.x` otherwise, and relative imports
are resolved the same way. Every import statement counts wherever it is written: at module
level, inside a function, and under `if TYPE_CHECKING:`. An import deferred into a function or
hidden behind TYPE_CHECKING stops the interpreter from tripping over a cycle, not the reader:
the two modules still need each other to be understood, tested and changed, so the fix is to
move what both need into a module below them (as `config/loaded.py` is for `config/loader.py`
and `config/validate.py`), not to hide the import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import PACKAGE

LAYERS = {
    # vocabulary: the words every layer uses (failures, header names, what the failure path
    # tells its observers), and the fence around other projects' internals
    "gateway": 0,
    "gateway.failure": 0,
    "gateway.header_names": 0,
    "gateway.observers": 0,
    "gateway.fence": 0,
    # text helpers and telemetry (metrics, logs) that any layer may call
    "gateway.text": 1,
    "gateway.telemetry": 1,
    "gateway.config": 2,
    "gateway.classify": 3,
    "gateway.resolve": 3,
    # what failures teach operators: captures, signatures, follow-ups
    "gateway.feedback": 4,
    # the transport-neutral step: classify, resolve, render under a budget
    "gateway.enrich": 5,
    # what both transports share: one request's context and per-config state, the upstream
    # client, header hygiene, bodies, relaying, and the HTTP answers both give
    "gateway.exchange": 6,
    # the transports, peers: neither imports the other
    "gateway.http": 7,
    "gateway.mcp": 7,
    "gateway.offline": 8,
    "gateway.serve": 9,
    "gateway.cli": 10,
    "gateway.__main__": 11,
}
MODULES = sorted(PACKAGE.rglob("*.py"))


def layer_of(module: str) -> int:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        layer = LAYERS.get(".".join(parts[:end]))
        if layer is not None and (end > 1 or module == "gateway"):
            return layer
    raise AssertionError(f"{module} is in no layer; add it to LAYERS")


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


NAMES = {module_name(p): p for p in MODULES}


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from … import` names, resolving leading dots against `module`."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".")
    if NAMES[module].name != "__init__.py":
        package.pop()
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _targets(module: str, node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = _absolute(module, node)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            yield submodule if submodule in NAMES else base


def imported(path: Path) -> set[str]:
    """Every gateway module `path` imports, from any statement anywhere in it."""
    module = module_name(path)
    names = {
        target
        for node in ast.walk(ast.parse(path.read_text()))
        for target in _targets(module, node)
    }
    return {n for n in names if (n == "gateway" or n.startswith("gateway.")) and n != module}


GRAPH = {name: imported(path) & NAMES.keys() for name, path in NAMES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: list[str] = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_no_module_imports_upward(path: Path) -> None:
    own = layer_of(module_name(path))
    upward = {name for name in imported(path) if layer_of(name) > own}
    assert not upward, f"{module_name(path)} (layer {own}) imports upward: {sorted(upward)}"


TRANSPORTS = ("gateway.http", "gateway.mcp")


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_the_transports_are_peers(path: Path) -> None:
    """HTTP and MCP routes share the exchange band below them and never import each other:
    what both need moves down (docs/development.md#layout)."""
    module = module_name(path)
    own = next((t for t in TRANSPORTS if module == t or module.startswith(t + ".")), None)
    if own is None:
        return
    others = [t for t in TRANSPORTS if t != own]
    crossing = {n for n in imported(path) for t in others if n == t or n.startswith(t + ".")}
    assert not crossing, f"{module} imports the other transport: {sorted(crossing)}"


SPAWNS = frozenset({"create_task", "ensure_future"})


def dropped_tasks(tree: ast.AST) -> list[int]:
    """Lines where a task is started and its reference thrown away."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and (
            node.value.func.attr
            if isinstance(node.value.func, ast.Attribute)
            else getattr(node.value.func, "id", "")
        )
        in SPAWNS
    ]


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_every_background_task_is_kept(path: Path) -> None:
    """The loop holds only a weak reference to a task: one nobody keeps may be collected
    before it ends, and nobody awaits its exception. Keep it (a set, discarded when done),
    and await or cancel it when its owner closes (as `bridge_owners` closes its clients)."""
    assert dropped_tasks(ast.parse(path.read_text())) == []


def test_the_task_check_sees_a_dropped_task() -> None:
    tree = ast.parse("loop.create_task(x())\nkept = asyncio.ensure_future(y())\n")
    assert dropped_tasks(tree) == [1]


def test_no_import_cycles() -> None:
    found = cycles(GRAPH)
    described = [
        " ".join(f"{a} → {sorted(GRAPH[a] & set(component))}" for a in component)
        for component in found
    ]
    assert found == [], f"import cycles: {described}"


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
    ids=["two-cycle", "three-cycle", "chain"],
)
def test_cycle_finder_finds_cycles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    """The guard above is only as good as the search it runs."""
    assert cycles(graph) == expected


def test_function_level_and_type_checking_imports_are_edges() -> None:
    """A deferred import is still an edge: that is the decision the module docstring explains."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from gateway.config.loaded import LoadedConfig\n"
        "def f() -> None:\n    from gateway.config import validate\n"
        "    from .models import GatewayConfig\n"
    )
    tree = ast.parse(source)
    targets = {t for node in ast.walk(tree) for t in _targets("gateway.config.validate", node)}
    assert targets >= {"gateway.config.loaded", "gateway.config.validate", "gateway.config.models"}


def test_only_telemetry_may_import_prometheus() -> None:
    offenders = [
        module_name(p)
        for p in MODULES
        if "prometheus_client" in p.read_text()
        and module_name(p) not in {"gateway.telemetry.metrics", "gateway.telemetry.multiprocess"}
    ]
    assert offenders == []


MAX_MODULE_LINES = 450
VOCABULARY = {"__init__.py", "__main__.py", "failure.py", "header_names.py", "observers.py"}


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_no_module_is_longer_than_a_sitting(path: Path) -> None:
    """A module a reader takes in at once; past this it is two concepts (docs/development.md)."""
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module_name(path)}: {lines} lines; split it by concept"


def test_the_top_level_holds_only_the_vocabulary() -> None:
    """Everything else lives in the package of its band, so the folders show the layers."""
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top <= VOCABULARY, f"move into a band's package: {sorted(top - VOCABULARY)}"
    assert len(top - {"__init__.py", "__main__.py"}) <= 3


def test_no_two_modules_share_a_file_name() -> None:
    """One name per concept: `tracking.py` in two packages meant two different things."""
    names: dict[str, list[str]] = {}
    for path in MODULES:
        if path.name != "__init__.py":
            names.setdefault(path.name, []).append(module_name(path))
    assert {n: m for n, m in names.items() if len(m) > 1} == {}


UPSTREAM_BOUNDARY = "gateway.exchange.upstream"


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_transport_faults_become_values_in_one_package(path: Path) -> None:
    """Past gateway/exchange/upstream/ a transport fault is a `TransportKind` (the call's result,
    a capped read's, or `UpstreamResponse.fault` after `chunks()`), never an exception to
    catch again: only that package names the exceptions or maps them."""
    if module_name(path).startswith(UPSTREAM_BOUNDARY):
        return
    names = {
        node.id if isinstance(node, ast.Name) else node.attr
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Name | ast.Attribute)
    }
    assert not names & {"UPSTREAM_ERRORS", "transport_kind"}, "use the upstream package's values"


def test_every_package_is_a_band() -> None:
    """A new package gets its band in LAYERS, on purpose, rather than its parent's by accident."""
    packages = {module_name(p.parent / "__init__.py") for p in MODULES if p.name == "__init__.py"}
    bands = {p for p in packages if p.count(".") == 1}
    assert bands <= LAYERS.keys(), sorted(bands - LAYERS.keys())


TESTS = PACKAGE.parent / "tests"
SYSTEM_SUITES = {
    "transparency": "the same as going direct: differentials through real clients",
    "fleet": "replicas sharing a real Redis",
    "mappings": "the shipped packs against the real frameworks they encode",
    "first_action": "the first-action corpus and its held-out sets",
    "corpus": "the corpus's configs",
    "examples": "the demo API and `make run`",
    "deploy": "the container image, the manifests, the compose file",
    "docs": "the docs site and what it promises",
    "bench": "the benchmark harness",
    "soak": "minutes of mixed traffic (`make soak`)",
    "frameworks": "the framework apps the tests run",
    "mcp_servers": "the MCP servers the tests run",
    "support": "shared helpers",
    "setup": "what the test set-up installs",
}
"""Test folders that are not a band of the package: what each holds."""


def test_the_test_tree_follows_the_package() -> None:
    """A folder per band of gateway/ (its tests), and the system-level suites apart."""
    bands = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert bands - folders == set(), "give each band a tests/ folder of its name"
    strays = folders - bands - SYSTEM_SUITES.keys()
    assert strays == set(), "a test folder is a band's, or a system suite named in SYSTEM_SUITES"


TEST_MODULES = sorted(TESTS.rglob("test_*.py"))


@pytest.mark.parametrize("path", TEST_MODULES, ids=[p.stem for p in TEST_MODULES])
def test_test_modules_import_only_the_support_package(path: Path) -> None:
    """Shared helpers live in tests/support, the framework apps the tests run in
    tests/frameworks and the first-action corpus's harness in tests/first_action; a test
    module never imports another test module."""
    tree = ast.parse(path.read_text())
    test_imports = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module
        and (node.module.startswith("tests.") or node.module in {"conftest", "faultserver"})
        and not node.module.startswith(("tests.support", "tests.frameworks", "tests.first_action"))
    }
    assert test_imports == set()


HEADER_NAMES = {"x-request-id", "mcp-session-id", "x-error-format"}


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_header_names_are_spelled_only_in_header_names(path: Path) -> None:
    """One meaning per name: every module uses `gateway.header_names`, none spells its own."""
    if module_name(path) == "gateway.header_names":
        return
    spelled = {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.lower() in HEADER_NAMES
    }
    assert spelled == set(), "import it from gateway.header_names"


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_jsonrpc_errors_are_built_only_in_rpc_errors(path: Path) -> None:
    """A dict literal with both "jsonrpc" and "error" keys, or a literal JSON text holding
    both, is a JSON-RPC error being built."""
    if module_name(path) == "gateway.mcp.rpc_errors":
        return
    built = [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if (
            isinstance(node, ast.Dict)
            and {"jsonrpc", "error"}
            <= {
                k.value
                for k in node.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
        )
        or (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str | bytes)
            and _json_error_text(node.value)
        )
    ]
    assert built == [], "build it with gateway.mcp.rpc_errors"


def _string_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _json_error_text(value: str | bytes) -> bool:
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return '"jsonrpc"' in text and '"error"' in text
