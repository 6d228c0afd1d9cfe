"""`mendpoint stdio`: the gateway between an MCP host and a stdio server it starts.

The server is started the moment the command line is parsed, before the relay, the event loop
or the config is imported (docs/performance.md#mcp-start-up): what is imported before it adds
to every chat's start-up, what is imported after overlaps the server's own. The session logs
to stderr (stdout is the protocol's) in the lines `serve` writes, JSON unless told otherwise
(docs/operations.md#logs); the server's own stderr passes through as it wrote it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

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
        from gateway.telemetry.log_lines import chosen

        chosen(args.log_level, None, None)  # a bad MENDPOINT_LOG_FORMAT is a usage error
    except ValueError as exc:
        spawned.abandon()
        print(f"mendpoint stdio: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BaseException:
        spawned.abandon()
        raise
    path: str | None = args.config
    level: str | None = args.log_level
    return serve_stdio(spawned, lambda: read_config(path, level), Mode(args.mode), args.grace)


def read_config(path: str | None, log_level: str | None) -> StdioConfig:
    """Run once the server has started: the file is read and parsed here, the models and packs
    are loaded later, in a thread, from the same text. The log is set up here, from the
    flag, the environment and the file's `log:` block as read now (`early_log`)."""
    from gateway.config.relay_limits import RelayLimits, early_limits
    from gateway.mcp.stdio_start import StdioConfig
    from gateway.serve.process_tuning import starting
    from gateway.telemetry.log_lines import chosen, setup_events

    if path is None:
        setup_events(*chosen(log_level, None, None))
        return StdioConfig(RelayLimits(), _embedded, starting)
    from gateway.config.yamlsrc import read_yaml

    doc = read_yaml(path)
    setup_events(*chosen(log_level, *early_log(doc.data)))

    def load() -> LoadedConfig:
        from gateway.config.loader import load_config

        return load_config(path, doc)

    return StdioConfig(early_limits(doc.data), load, starting)


def early_log(data: Any) -> tuple[str | None, str | None]:
    """The level and format a config's `log:` block sets, read from its YAML before the models
    load; a value the model would refuse is left to it (the load ends the session with the
    file and line), and the default is used until then."""
    from gateway.telemetry.log_lines import FORMATS, LEVELS

    block = data.get("log") if isinstance(data, dict) else None
    if not isinstance(block, dict):
        return None, None
    level, fmt = block.get("level"), block.get("format")
    return (level if level in LEVELS else None), (fmt if fmt in FORMATS else None)


def _embedded() -> LoadedConfig:
    from gateway.config.loader import embedded_config

    return embedded_config("http://127.0.0.1:9")
