"""Where things are in the checkout, for tests that start subprocesses or read shipped files."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
PACKAGE = REPO / "gateway"
EXAMPLES = REPO / "examples"
DEPLOY = REPO / "deploy"
MCP_SERVERS = TESTS / "mcp_servers"
FRAMEWORKS = TESTS / "frameworks"
CORPUS = TESTS / "corpus"
DOCS = REPO / "docs"
