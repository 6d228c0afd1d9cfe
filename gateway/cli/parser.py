"""The `mendpoint` command line: every command, its arguments, and which module runs it.

Each command's module is imported when that command runs, not before: `mendpoint stdio`
starts an MCP server per chat, and should not pay for importing the resolver or `explain`.
Every argument has its help text (tests/cli/test_help.py walks the parser for one without).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from gateway import __version__
from gateway.config.admin_address import DEFAULT_ADMIN
from gateway.config.secrets import (
    ADMIN_TOKEN_ENV,
    TOKEN_ENV,
)
from gateway.failure import Mode, TransportKind

if TYPE_CHECKING:
    from gateway.serve.workers import WorkerCount


DESCRIPTION = (
    "Mendpoint: a transparent reverse proxy in front of an HTTP API or an MCP tool server. "
    "Successes pass through untouched; failures (4xx/5xx answers, transport faults, MCP tool "
    "and JSON-RPC errors) are classified by YAML rules into a recovery envelope an agent can "
    "act on: code, retryable, retry_after_ms, fix_required, fix_command."
)
EPILOG = (
    "Try it: mendpoint serve --upstream http://127.0.0.1:9000 (the shipped rules, no config "
    "file). The product contract: docs/spec.md; every config key: docs/configuration.md."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mendpoint", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "--version",
        action="version",
        version=f"mendpoint {__version__}",
        help="print the version and exit",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="overrides MENDPOINT_LOG_LEVEL and the config's log.level (default info)",
    )
    sub = parser.add_subparsers(
        required=True, metavar="COMMAND", help="run `mendpoint COMMAND --help` for its options"
    )

    serve = _command(sub, "serve", help="run the gateway")
    _config_source(serve)
    serve.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        help="the embedded default route's mode, with --upstream only (overrides MENDPOINT_MODE;"
        " default additive); with --config, each route's mode: is in the file",
    )
    serve.add_argument("--listen", help="HOST:PORT to listen on (overrides the config)")
    serve.add_argument(
        "--admin", help=f"HOST:PORT of the admin listener (default {DEFAULT_ADMIN}), or 'off'"
    )
    serve.add_argument(
        "--workers",
        type=_worker_count,
        metavar="N|auto",
        help="processes sharing the listen port (SO_REUSEPORT, Linux); 0 or auto: one per "
        "usable CPU (overrides MENDPOINT_WORKERS and the config's workers; default 1)",
    )
    # Internal: the supervisor of `--workers N` starts each worker with its end of a link.
    serve.add_argument("--worker-link", type=int, help=argparse.SUPPRESS)
    serve.set_defaults(run=_serve)

    gaps = _command(sub, "gaps", help="print the top unmatched-error signatures of a gateway")
    gaps.add_argument("--admin", required=True, help="the gateway's admin URL or HOST:PORT")
    gaps.add_argument(
        "--limit", type=int, default=20, help="how many signatures to print (default 20)"
    )
    gaps.add_argument(
        "--window",
        type=int,
        default=900,
        metavar="SECONDS",
        help="count the failures of the last SECONDS (default 900, at most 10800)",
    )
    gaps.add_argument(
        "--reset", action="store_true", help="start the counts afresh (needs the admin token)"
    )
    _admin_token_argument(gaps)
    gaps.set_defaults(run=_gaps)
    followups = _command(
        sub,
        "followups",
        help="print what callers did after each code's failures (docs/operations.md)",
    )
    followups.add_argument("--admin", required=True, help="the gateway's admin URL or HOST:PORT")
    _admin_token_argument(followups)
    followups.set_defaults(run=_followups)

    init = _command(
        sub, "init", help="write a starter config for an upstream, from its OpenAPI document"
    )
    init.add_argument("--upstream", required=True, help="the API's base URL")
    init.add_argument("--openapi", help="its OpenAPI document: a file or URL (default: probe)")
    init.add_argument("--out", default="mendpoint.yaml", help="the config to write")
    init.add_argument("--force", action="store_true", help="replace existing files")
    init.set_defaults(run=_init)

    suggest = _command(
        sub, "suggest", help="draft rules from captured or live unmatched failures (docs/rules.md)"
    )
    suggest.add_argument(
        "--from", dest="source", required=True, help="a capture directory, or an admin HOST:PORT"
    )
    suggest.add_argument("--out", required=True, help="the rule file to write")
    suggest.add_argument(
        "--config",
        help="the config the gateway runs (default MENDPOINT_CONFIG): each draft is tried "
        "with it on its own samples before it is written",
    )
    suggest.add_argument(
        "--window",
        type=int,
        default=10_800,
        metavar="SECONDS",
        help="with --from HOST:PORT, the gaps of the last SECONDS (default and most: 10800)",
    )
    suggest.add_argument("--force", action="store_true", help="replace existing files")
    _admin_token_argument(suggest)
    suggest.set_defaults(run=_suggest)

    check = _command(sub, "check", help="validate a config and every rule pack it includes")
    check.add_argument("--config", required=True, help="the gateway config file to validate")
    check.set_defaults(run=_check)

    exp = _command(sub, "explain", help="show which rule matches a sample and what it renders")
    _config_source(exp)
    exp.add_argument("--status", type=int, help="the upstream status")
    exp.add_argument(
        "--transport",
        choices=[k.value for k in TransportKind],
        help="a transport fault instead of a status",
    )
    exp.add_argument("--body", help="file holding the upstream body ('-' for stdin)")
    exp.add_argument("--method", default="GET", help="the request's method (default GET)")
    exp.add_argument("--path", default="/", help="the request's path, for routes and rules")
    exp.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="an upstream response header (repeatable)",
    )
    exp.add_argument(
        "--request-header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="a header the caller sent, e.g. Idempotency-Key:k1 (repeatable)",
    )
    exp.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default=Mode.ENVELOPE.value,
        help="the mode to render the answer in (default envelope)",
    )
    exp.add_argument(
        "--caller", help="resolve recovery options with this configured caller's scopes"
    )
    exp.set_defaults(run=_explain)

    resolver = _command(sub, "resolver", help="serve the remote-resolver endpoint from a catalog")
    resolver.add_argument("--config", required=True, help="a config, or a pack with skills:")
    resolver.add_argument("--listen", default="127.0.0.1:8090", help="HOST:PORT to listen on")
    resolver.add_argument(
        "--token-file",
        metavar="FILE",
        help="accept only requests with `Authorization: Bearer TOKEN` for a token in FILE (one "
        f"per line; overrides {TOKEN_ENV}; docs/security.md)",
    )
    resolver.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate")
    resolver.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert")
    resolver.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="mutual TLS: require a client certificate signed by this CA",
    )
    resolver.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve without a token on a non-loopback address (anyone who reaches it can read "
        "the whole catalog)",
    )
    resolver.set_defaults(run=_resolver)

    stdio = _command(
        sub,
        "stdio",
        help="run an MCP stdio server behind the gateway: stdio [--config F] -- CMD ARGS...",
    )
    stdio.add_argument("--config", help="gateway config file (its rules, packs and mcp: block)")
    stdio.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default=Mode.ADDITIVE.value,
        help="how upgraded tool errors are written (default additive; docs/mcp.md)",
    )
    stdio.add_argument(
        "--grace",
        type=float,
        metavar="S",
        help="seconds pending calls may run after the client closes its input "
        "(default: mcp.stdio_grace_s, 60; docs/mcp.md)",
    )
    stdio.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the server to start"
    )
    stdio.set_defaults(run=_stdio)

    schema = _command(
        sub,
        "schema",
        help="print the JSON Schema of a config, rule or fixture file (for editors; "
        "docs/configuration.md#editor-support)",
    )
    schema.add_argument(
        "kind",
        nargs="?",
        choices=_SchemaKinds(),
        default="config",
        metavar="{config,fixtures,rules}",
        help="which file's schema (default config)",
    )
    schema.set_defaults(run=_schema)

    test = _command(sub, "test", help="run rule fixture files against a config")
    _config_source(test)
    test.add_argument("fixtures", nargs="+", help="fixture files (or builtin:NAME)")
    test.set_defaults(run=_test)
    return parser


class _Commands(Protocol):
    """What `add_subparsers` returns, as far as `_command` uses it."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def _command(sub: _Commands, name: str, help: str) -> argparse.ArgumentParser:
    """A command whose one-line help in `mendpoint --help` heads its own `--help` too."""
    return sub.add_parser(name, help=help, description=help)


def _admin_token_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--token-file",
        help="a file whose first line is the admin token, for a gateway with admin_token_file "
        f"(default: {ADMIN_TOKEN_ENV}; docs/security.md#admin-authentication)",
    )


class _SchemaKinds:
    """The `schema` command's choices, read from `gateway.offline.schema` (the config models) only
    when that command is parsed or its help printed: building the parser imports nothing
    heavy (the module docstring says why)."""

    METAVAR = "{config,fixtures,rules}"
    """How usage lines name them: tests/cli checks it lists the names `_names` reads."""

    def _names(self) -> list[str]:
        from gateway.offline.schema import KINDS

        return sorted(KINDS)

    def __contains__(self, value: object) -> bool:
        return value in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())


def _worker_count(text: str) -> WorkerCount:
    from gateway.serve import workers

    try:
        return workers.parse_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _config_source(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--config", help="gateway config file (docs/configuration.md)")
    group.add_argument("--upstream", help="run the embedded default in front of this URL")


# Each command's module is imported when it runs (the module docstring says why).


def _serve(args: argparse.Namespace) -> int:
    from gateway.serve import process_tuning

    with process_tuning.starting():  # the collector rests until the listeners are up
        from gateway.cli.serve_command import run_serve

        return run_serve(args)


def _gaps(args: argparse.Namespace) -> int:
    from gateway.cli.admin_commands import run_gaps

    return run_gaps(args)


def _followups(args: argparse.Namespace) -> int:
    from gateway.cli.admin_commands import run_followups

    return run_followups(args)


def _init(args: argparse.Namespace) -> int:
    from gateway.cli.init_command import run_init

    return run_init(args.upstream, args.openapi, args.out, args.force)


def _suggest(args: argparse.Namespace) -> int:
    from gateway.cli.suggest_command import run_suggest

    return run_suggest(args.source, args.out, args.force, args.token_file, args.config, args.window)


def _check(args: argparse.Namespace) -> int:
    from gateway.cli.rule_commands import run_check

    return run_check(args)


def _explain(args: argparse.Namespace) -> int:
    from gateway.cli.rule_commands import run_explain

    return run_explain(args)


def _resolver(args: argparse.Namespace) -> int:
    from gateway.cli.resolver_command import run_resolver

    return run_resolver(args)


def _stdio(args: argparse.Namespace) -> int:
    from gateway.cli.stdio_command import run_stdio

    return run_stdio(args)


def _schema(args: argparse.Namespace) -> int:
    from gateway.cli.rule_commands import run_schema

    return run_schema(args)


def _test(args: argparse.Namespace) -> int:
    from gateway.cli.rule_commands import run_test

    return run_test(args)
