"""`mendpoint stdio`: the gateway between an MCP host and a stdio server it starts."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gateway.cli.exits import EXIT_USAGE
from gateway.config.relay_limits import RelayLimits, early_limits
from gateway.failure import Mode
from gateway.mcp.stdio_start import StdioConfig
from gateway.mcp.stdio_start import run_stdio as serve_stdio

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
    return serve_stdio(lambda: read_config(path), command, Mode(args.mode), args.grace)


def read_config(path: str | None) -> StdioConfig:
    """Run once the server has started (docs/performance.md#mcp-start-up): the file is read
    and parsed here, the models and packs are loaded later, in a thread, from the same text."""
    if path is None:
        return StdioConfig(RelayLimits(), _embedded)
    from gateway.config.yamlsrc import read_yaml

    doc = read_yaml(path)

    def load() -> LoadedConfig:
        from gateway.config.loader import load_config

        return load_config(path, doc)

    return StdioConfig(early_limits(doc.data), load)


def _embedded() -> LoadedConfig:
    from gateway.config.loader import embedded_config

    return embedded_config("http://127.0.0.1:9")
