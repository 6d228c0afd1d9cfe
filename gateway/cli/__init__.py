"""The `mendpoint` command: serve, check, explain, test, init, suggest, schema, resolver, stdio,
gaps and followups.

Every config problem is printed as `FILE:LINE: field: what is wrong` and exits with status 1;
no input, however bad, produces a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import ssl
import sys
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from gateway import __version__
from gateway.cli.init_command import run_init
from gateway.cli.suggest_command import run_suggest
from gateway.config.errors import ConfigError
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import builtin_text, embedded_config, load_catalog, load_config
from gateway.config.models import DEFAULT_ADMIN, parse_host_port
from gateway.config.secrets import (
    ADMIN_TOKEN_ENV,
    TOKEN_ENV,
    TlsError,
    TokenError,
    server_tls,
)
from gateway.failure import Mode, TransportKind
from gateway.feedback.followups import Outcome, reading
from gateway.mcp.stdio import run_stdio
from gateway.offline.explain import Sample, SampleError, explain
from gateway.offline.fixtures import load_fixtures, run_fixtures
from gateway.offline.schema import KINDS, schema_text
from gateway.resolve.auth import TokenFile
from gateway.resolve.callers import ANONYMOUS, CallerDirectory
from gateway.resolve.server import RESOLVE_PATH, build_resolver_app
from gateway.resolve.service import RecoveryService
from gateway.serve import process_tuning, supervisor, workers
from gateway.serve.admin import AdminError, admin_get, admin_token
from gateway.serve.app import UnsafeRuntime, require_c_parser, serve_forever
from gateway.serve.listeners import dual_stack_socket, is_loopback
from gateway.telemetry.logs import setup_logging

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, (args.log_level or "info").upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        result: int = args.run(args)
        sys.stdout.flush()
        return result
    except BrokenPipeError:
        # The reader left early (`mendpoint explain … | head`): its choice, not an error.
        # Point stdout at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INVALID
    except (UnsafeRuntime, SampleError, OSError) as exc:
        print(f"mendpoint: {exc}", file=sys.stderr)
        return EXIT_INVALID


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mendpoint",
        description=__doc__.splitlines()[0],
        epilog="The product contract: docs/spec.md; every config key: docs/configuration.md.",
    )
    parser.add_argument("--version", action="version", version=f"mendpoint {__version__}")
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="overrides MENDPOINT_LOG_LEVEL and the config's log.level (default info)",
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the gateway")
    _config_source(serve)
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

    gaps = sub.add_parser("gaps", help="print the top unmatched-error signatures of a gateway")
    gaps.add_argument("--admin", required=True, help="the gateway's admin URL or HOST:PORT")
    gaps.add_argument("--limit", type=int, default=20)
    _admin_token_argument(gaps)
    gaps.set_defaults(run=_gaps)
    followups = sub.add_parser(
        "followups", help="print what callers did after each code's failures (docs/operations.md)"
    )
    followups.add_argument("--admin", required=True, help="the gateway's admin URL or HOST:PORT")
    _admin_token_argument(followups)
    followups.set_defaults(run=_followups)

    init = sub.add_parser(
        "init", help="write a starter config for an upstream, from its OpenAPI document"
    )
    init.add_argument("--upstream", required=True, help="the API's base URL")
    init.add_argument("--openapi", help="its OpenAPI document: a file or URL (default: probe)")
    init.add_argument("--out", default="mendpoint.yaml", help="the config to write")
    init.add_argument("--force", action="store_true", help="replace existing files")
    init.set_defaults(run=_init)

    suggest = sub.add_parser(
        "suggest", help="draft rules from captured or live unmatched failures (docs/rules.md)"
    )
    suggest.add_argument(
        "--from", dest="source", required=True, help="a capture directory, or an admin HOST:PORT"
    )
    suggest.add_argument("--out", required=True, help="the rule file to write")
    suggest.add_argument("--force", action="store_true", help="replace existing files")
    _admin_token_argument(suggest)
    suggest.set_defaults(run=_suggest)

    check = sub.add_parser("check", help="validate a config and every rule pack it includes")
    check.add_argument("--config", required=True)
    check.set_defaults(run=_check)

    exp = sub.add_parser("explain", help="show which rule matches a sample and what it renders")
    _config_source(exp)
    exp.add_argument("--status", type=int, help="the upstream status")
    exp.add_argument(
        "--transport",
        choices=[k.value for k in TransportKind],
        help="a transport fault instead of a status",
    )
    exp.add_argument("--body", help="file holding the upstream body ('-' for stdin)")
    exp.add_argument("--method", default="GET")
    exp.add_argument("--path", default="/")
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
    exp.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.ENVELOPE.value)
    exp.add_argument(
        "--caller", help="resolve recovery options with this configured caller's scopes"
    )
    exp.set_defaults(run=_explain)

    resolver = sub.add_parser("resolver", help="serve the remote-resolver endpoint from a catalog")
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

    stdio = sub.add_parser(
        "stdio",
        help="run an MCP stdio server behind the gateway: stdio [--config F] -- CMD ARGS...",
    )
    stdio.add_argument("--config", help="gateway config file (its rules, packs and mcp: block)")
    stdio.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.ADDITIVE.value)
    stdio.add_argument(
        "--grace",
        type=float,
        metavar="S",
        help="seconds pending calls may run after the client closes its input "
        "(default: mcp.stdio_grace_s, 60; docs/mcp.md)",
    )
    stdio.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    stdio.set_defaults(run=_stdio)

    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of a config, rule or fixture file (for editors; "
        "docs/configuration.md#editor-support)",
    )
    schema.add_argument("kind", nargs="?", choices=sorted(KINDS), default="config")
    schema.set_defaults(run=_schema)

    test = sub.add_parser("test", help="run rule fixture files against a config")
    _config_source(test)
    test.add_argument("fixtures", nargs="+", help="fixture files (or builtin:NAME)")
    test.set_defaults(run=_test)
    return parser


def _admin_token_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--token-file",
        help="a file whose first line is the admin token, for a gateway with admin_token_file "
        f"(default: {ADMIN_TOKEN_ENV}; docs/security.md#admin-authentication)",
    )


def _worker_count(text: str) -> workers.WorkerCount:
    try:
        return workers.parse_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _config_source(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--config", help="gateway config file (docs/configuration.md)")
    group.add_argument("--upstream", help="run the embedded default in front of this URL")


def _load(args: argparse.Namespace) -> LoadedConfig:
    if getattr(args, "config", None):
        return load_config(args.config)
    upstream = getattr(args, "upstream", None) or "http://127.0.0.1:9000"
    listen = getattr(args, "listen", None) or "127.0.0.1:8080"
    return embedded_config(upstream, listen)


def _serve(args: argparse.Namespace) -> int:
    """Flags win over MENDPOINT_* environment variables, which win over the config file."""
    env = os.environ
    config = args.config or (None if args.upstream else env.get("MENDPOINT_CONFIG"))
    upstream = args.upstream or env.get("MENDPOINT_UPSTREAM")
    if not config and not upstream:
        print(
            "mendpoint serve: give --config FILE or --upstream URL "
            "(or MENDPOINT_CONFIG / MENDPOINT_UPSTREAM)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    listen = args.listen or env.get("MENDPOINT_LISTEN")
    admin = args.admin or env.get("MENDPOINT_ADMIN")
    for name, value in (("listen", listen), ("admin", admin)):
        if value and value != "off":
            try:
                parse_host_port(value)
            except ValueError as exc:
                print(f"mendpoint serve: --{name}: {exc}", file=sys.stderr)
                return EXIT_USAGE
    count: workers.WorkerCount | None = args.workers
    if count is None and env.get("MENDPOINT_WORKERS"):
        try:
            count = workers.parse_count(env["MENDPOINT_WORKERS"])
        except ValueError as exc:
            print(f"mendpoint serve: MENDPOINT_WORKERS: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if config:
        loaded = load_config(config)
    else:
        assert upstream is not None
        loaded = embedded_config(
            upstream, listen or "127.0.0.1:8080", mode=env.get("MENDPOINT_MODE")
        )
    log_spec = loaded.config.log
    level = args.log_level or env.get("MENDPOINT_LOG_LEVEL") or log_spec.level
    fmt = env.get("MENDPOINT_LOG_FORMAT") or log_spec.format
    if fmt not in ("json", "text"):
        print("mendpoint serve: MENDPOINT_LOG_FORMAT must be json or text", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(level, "json" if fmt == "json" else "text", log_spec.access)
    admin_address = None if admin == "off" else (admin or loaded.config.admin)
    if args.worker_link is not None:  # one of `--workers N`, under its supervisor
        link = workers.WorkerLink(args.worker_link)
        process_tuning.run(serve_forever(loaded, listen, None, config_path=config, supervisor=link))
        return EXIT_OK
    processes = workers.resolve_count(loaded.config.workers if count is None else count)
    if processes > 1:
        if not workers.supported():
            print("mendpoint serve: --workers above 1 needs Linux (SO_REUSEPORT)", file=sys.stderr)
            return EXIT_USAGE
        require_c_parser()  # refuse before any worker starts, as a single gateway would
        argv = [sys.executable, "-m", "gateway"]
        if args.log_level:
            argv += ["--log-level", args.log_level]
        argv += ["serve", "--admin", "off"]
        argv += ["--config", config] if config else ["--upstream", str(upstream)]
        listen_address = listen or loaded.config.listen
        with contextlib.suppress(KeyboardInterrupt):
            return supervisor.supervise(
                processes,
                argv,
                listen_address,
                admin_address,
                loaded.config.shutdown,
                loaded.admin_token_file,
            )
        return EXIT_OK
    with contextlib.suppress(KeyboardInterrupt):
        process_tuning.run(serve_forever(loaded, listen, admin_address, config_path=config))
    return EXIT_OK


def _admin_json(command: str, args: argparse.Namespace, path: str) -> dict[str, Any] | None:
    """GET an admin endpoint, with the admin token when one is given; None (and a line on
    stderr) when it cannot be read."""
    try:
        payload = admin_get(args.admin, path, admin_token(args.token_file))
    except AdminError as exc:
        print(f"mendpoint {command}: {exc}", file=sys.stderr)
        return None
    return payload if isinstance(payload, dict) else {}


def _gaps(args: argparse.Namespace) -> int:
    payload = _admin_json("gaps", args, f"/gaps?limit={max(1, args.limit)}")
    if payload is None:
        return EXIT_INVALID
    rows = payload.get("signatures", [])
    if not rows:
        print("no unmatched failures yet: every failure so far matched one of your rules")
        return EXIT_OK
    print(f"{'count':>7}  {'route':<12} {'status':<22} signature")
    for row in rows:
        print(f"{row['count']:>7}  {row['route']:<12} {row['status']:<22} {row['signature']}")
    return EXIT_OK


def _followups(args: argparse.Namespace) -> int:
    payload = _admin_json("followups", args, "/followups")
    if payload is None:
        return EXIT_INVALID
    rows = payload.get("codes", [])
    if not rows:
        print("no failures followed up yet (or follow-up tracking is off)")
        return EXIT_OK
    print(f"window {payload.get('window_s')} s; wasted attempts first")
    columns = [o.value for o in Outcome]
    heads = [c.replace("retried_", "r_").replace("failed_", "f_") for c in columns]
    widths = [max(8, len(h)) for h in heads]
    cells = " ".join(f"{h:>{w}}" for h, w in zip(heads, widths, strict=True))
    print(f"{'route':<12} {'code':<24} {'failures':>8} {cells}")
    for row in rows:
        counts = " ".join(f"{row.get(c, 0):>{w}}" for c, w in zip(columns, widths, strict=True))
        print(f"{row['route']:<12} {row['code']:<24} {row['failures']:>8} {counts}")
    print()
    for row in rows:
        print(f"- {row['route']} {row['code']}: {reading(row)}")
    return EXIT_OK


def _init(args: argparse.Namespace) -> int:
    return run_init(args.upstream, args.openapi, args.out, args.force)


def _suggest(args: argparse.Namespace) -> int:
    return run_suggest(args.source, args.out, args.force, args.token_file)


def _check(args: argparse.Namespace) -> int:
    loaded = load_config(args.config)
    defaults = sum(1 for r in loaded.rules if r.is_default)
    print(
        f"{args.config}: OK — {len(loaded.config.routes)} route(s), "
        f"{len(loaded.rules)} rule(s) ({defaults} from shipped defaults), "
        f"{len(loaded.commands)} command(s), {len(loaded.skills)} skill(s)"
    )
    print("rules, in match order:")
    for file in loaded.packs:
        count = sum(1 for r in loaded.rules if r.source.file == file)
        print(f"  {file}: {count} rule(s)")
    return EXIT_OK


def _resolver(args: argparse.Namespace) -> int:
    try:
        host, port = parse_host_port(args.listen)
    except ValueError as exc:
        print(f"mendpoint resolver: --listen: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        tokens, tls = _resolver_credentials(args)
    except (TokenError, TlsError) as exc:
        print(f"mendpoint resolver: {exc}", file=sys.stderr)
        return EXIT_INVALID
    authenticated = tokens is not None or args.tls_client_ca is not None
    if not authenticated and not is_loopback(host):
        if not args.insecure_no_auth:
            print(
                f"mendpoint resolver: refusing to serve {host} without authentication: anyone "
                f"who can reach it could read the whole catalog. Give --token-file FILE (or "
                f"{TOKEN_ENV}) or --tls-client-ca, listen on a loopback address, or pass "
                f"--insecure-no-auth (docs/security.md)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        logging.getLogger("mendpoint.resolver").warning(
            "serving %s WITHOUT authentication (--insecure-no-auth): anyone who can reach it "
            "can read the whole catalog",
            host,
        )
    service = RecoveryService.build(load_catalog(args.config))
    needs = [
        w for w, on in (("bearer token", tokens), ("client certificate", args.tls_client_ca)) if on
    ]
    print(
        f"mendpoint resolver: catalog {service.catalog.version}, listening on "
        f"{'https' if tls else 'http'}://{host}:{port}{RESOLVE_PATH}"
        f"{' (' + ' and '.join(needs) + ' required)' if needs else ''}",
        file=sys.stderr,
        flush=True,
    )
    where: dict[str, Any] = {"host": host, "port": port}
    sock = dual_stack_socket(host, port)
    if sock is not None:  # `[::]`: IPv4 clients too (gateway.serve.listeners)
        where = {"sock": sock}
    web.run_app(
        build_resolver_app(service, tokens),
        **where,
        ssl_context=tls,
        access_log=None,
        print=None,
        handle_signals=True,
    )
    return EXIT_OK


def _resolver_credentials(
    args: argparse.Namespace,
) -> tuple[TokenFile | None, ssl.SSLContext | None]:
    """The token file and TLS context `mendpoint resolver` was given (TokenError, TlsError)."""
    token_path = args.token_file or os.environ.get(TOKEN_ENV, "").strip() or None
    tokens = TokenFile(token_path) if token_path is not None else None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise TlsError("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise TlsError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
    tls = None
    if args.tls_cert is not None:
        tls = server_tls(args.tls_cert, args.tls_key, args.tls_client_ca)
    return tokens, tls


def _header_pairs(items: list[str], flag: str) -> CIMultiDict[str] | None:
    """`NAME:VALUE` arguments as headers; None (after saying why) when one is malformed."""
    headers: CIMultiDict[str] = CIMultiDict()
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            print(f"mendpoint explain: {flag} {item!r} must be NAME:VALUE", file=sys.stderr)
            return None
        headers.add(name.strip(), value.strip())
    return headers


def _explain(args: argparse.Namespace) -> int:
    if (args.status is None) == (args.transport is None):
        print("mendpoint explain: give exactly one of --status or --transport", file=sys.stderr)
        return EXIT_USAGE
    headers = _header_pairs(args.header, "--header")
    request_headers = _header_pairs(args.request_header, "--request-header")
    if headers is None or request_headers is None:
        return EXIT_USAGE
    body = b""
    if args.body == "-":
        body = sys.stdin.buffer.read()
    elif args.body:
        with open(args.body, "rb") as handle:
            body = handle.read()
    sample = Sample(
        method=args.method.upper(),
        path=args.path,
        status=args.status,
        headers=headers,
        body=body,
        transport=TransportKind(args.transport) if args.transport else None,
        request_headers=request_headers,
    )
    loaded = _load(args)
    caller = ANONYMOUS
    if args.caller:
        found = CallerDirectory.build(loaded.callers).by_name(args.caller)
        if found is None:
            print(
                f"mendpoint explain: no caller named {args.caller!r} in the config", file=sys.stderr
            )
            return EXIT_USAGE
        caller = found
    result = asyncio.run(explain(loaded, sample, Mode(args.mode), caller=caller))
    if result.verdict is None:
        print(f"route: {result.route}\nno rule matched: the response would pass through")
        return EXIT_OK
    rule = result.verdict.rule
    print(f"route: {result.route}")
    print(f"rule:  {rule.id} ({rule.origin}{', shipped default' if rule.is_default else ''})")
    rendering = result.rendering
    if rendering is not None:
        for name, value in rendering.headers:
            print(f"header: {name}: {value}")
        if rendering.body is not None:
            print(
                json.dumps(json.loads(rendering.body), indent=2, ensure_ascii=False)
                if rendering.content_type != "text/plain; charset=utf-8"
                and _is_json(rendering.body)
                else rendering.body.decode()
            )
        else:
            print("body: unchanged (the upstream's bytes)")
    for skill, reason in result.filtered:
        print(f"operator note: skill {skill} not offered: {reason}")
    return EXIT_OK


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def _stdio(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("mendpoint stdio: give the server command after --", file=sys.stderr)
        return EXIT_USAGE
    loaded = load_config(args.config) if args.config else embedded_config("http://127.0.0.1:9")
    if args.grace is not None and not 0 < args.grace <= 86_400:
        print("mendpoint stdio: --grace must be above 0 and at most 86400", file=sys.stderr)
        return EXIT_USAGE
    return run_stdio(loaded, command, Mode(args.mode), args.grace)


def _schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text(args.kind))
    return EXIT_OK


def _test(args: argparse.Namespace) -> int:
    loaded = _load(args)
    failed = passed = 0
    for path in args.fixtures:
        if path.startswith("builtin:"):
            text = builtin_text(f"fixtures/{path.removeprefix('builtin:')}")
        else:
            text = _read_text(path)
        for result in run_fixtures(loaded, load_fixtures(text, path)):
            if result.passed:
                passed += 1
                continue
            failed += 1
            print(f"FAIL {path}: {result.name}")
            for mismatch in result.mismatches:
                print(f"    {mismatch}")
    print(f"{passed} passed, {failed} failed")
    return EXIT_OK if failed == 0 else EXIT_INVALID


def _read_text(path: str) -> str:
    """A fixture file's text; one that is not UTF-8 is a config problem, not a traceback."""
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError.single(path, None, "", f"not UTF-8 text ({exc.reason})") from None


if __name__ == "__main__":
    sys.exit(main())
