"""`mendpoint resolver`: the remote-resolver endpoint served from a catalog."""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys
from typing import Any

from aiohttp import web

from gateway.cli.exits import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from gateway.config.loader import load_catalog
from gateway.config.model_base import parse_host_port
from gateway.config.secrets import (
    TOKEN_ENV,
    TlsError,
    TokenError,
    server_tls,
)
from gateway.resolve.auth import TokenFile
from gateway.resolve.server import RESOLVE_PATH, build_resolver_app
from gateway.resolve.service import RecoveryService
from gateway.serve.listeners import dual_stack_socket, is_loopback


def run_resolver(args: argparse.Namespace) -> int:
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
