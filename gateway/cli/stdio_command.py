"""`mendpoint stdio`: the gateway between an MCP host and a stdio server it starts."""

from __future__ import annotations

import argparse
import sys

from gateway.cli.exits import EXIT_USAGE
from gateway.config.loader import embedded_config, load_config
from gateway.failure import Mode
from gateway.mcp.stdio import run_stdio as serve_stdio


def run_stdio(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("mendpoint stdio: give the server command after --", file=sys.stderr)
        return EXIT_USAGE
    loaded = load_config(args.config) if args.config else embedded_config("http://127.0.0.1:9")
    if args.grace is not None and not 0 < args.grace <= 86_400:
        print("mendpoint stdio: --grace must be above 0 and at most 86400", file=sys.stderr)
        return EXIT_USAGE
    return serve_stdio(loaded, command, Mode(args.mode), args.grace)
