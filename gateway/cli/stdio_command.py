"""`mendpoint stdio`: the gateway between an MCP host and a stdio server it starts."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gateway.cli.exits import EXIT_USAGE
from gateway.failure import Mode
from gateway.mcp.stdio import run_stdio as serve_stdio

if TYPE_CHECKING:
    from gateway.config.loaded import LoadedConfig


def run_stdio(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("mendpoint stdio: give the server command after --", file=sys.stderr)
        return EXIT_USAGE
    if args.grace is not None and not 0 < args.grace <= 86_400:
        print("mendpoint stdio: --grace must be above 0 and at most 86400", file=sys.stderr)
        return EXIT_USAGE
    path: str | None = args.config

    def load() -> LoadedConfig:
        """Read once the server has started (docs/performance.md#mcp-start-up)."""
        from gateway.config.loader import embedded_config, load_config

        return load_config(path) if path else embedded_config("http://127.0.0.1:9")

    return serve_stdio(load, command, Mode(args.mode), args.grace)
