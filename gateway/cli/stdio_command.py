"""`mendpoint stdio`: the gateway between an MCP host and a stdio server it starts.

The server is started the moment the command line is parsed, before the relay, the event loop
or the config is imported (docs/performance.md#mcp-start-up): what is imported before it adds
to every chat's start-up, what is imported after overlaps the server's own.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gateway.cli.exits import EXIT_USAGE

if TYPE_CHECKING:
    from gateway.config.loaded import LoadedConfig
    from gateway.mcp.stdio_start import StdioConfig


def run_stdio(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("mendpoint stdio: give the server command after --", file=sys.stderr)
        return EXIT_USAGE
    if args.grace is not None and not 0 < args.grace <= 86_400:
        print("mendpoint stdio: --grace must be above 0 and at most 86400", file=sys.stderr)
        return EXIT_USAGE
    from gateway.mcp.spawn import Spawned

    spawned = Spawned.spawn(command)
    try:
        from gateway.failure import Mode
        from gateway.mcp.stdio_start import serve_stdio
    except BaseException:
        spawned.abandon()
        raise
    path: str | None = args.config
    return serve_stdio(spawned, lambda: read_config(path), Mode(args.mode), args.grace)


def read_config(path: str | None) -> StdioConfig:
    """Run once the server has started: the file is read and parsed here, the models and packs
    are loaded later, in a thread, from the same text."""
    from gateway.config.relay_limits import RelayLimits, early_limits
    from gateway.mcp.stdio_start import StdioConfig
    from gateway.serve.process_tuning import starting

    if path is None:
        return StdioConfig(RelayLimits(), _embedded, starting)
    from gateway.config.yamlsrc import read_yaml

    doc = read_yaml(path)

    def load() -> LoadedConfig:
        from gateway.config.loader import load_config

        return load_config(path, doc)

    return StdioConfig(early_limits(doc.data), load, starting)


def _embedded() -> LoadedConfig:
    from gateway.config.loader import embedded_config

    return embedded_config("http://127.0.0.1:9")
