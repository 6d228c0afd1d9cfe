"""`mendpoint serve`: the gateway, in one process or as a supervisor of workers."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from gateway.cli.exits import EXIT_OK, EXIT_USAGE
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import embedded_config, load_config
from gateway.config.model_base import parse_host_port
from gateway.serve import process_tuning, supervisor, workers
from gateway.serve.app import require_c_parser, serve_forever
from gateway.telemetry.log_lines import chosen
from gateway.telemetry.logs import setup_logging


def config_of(args: argparse.Namespace) -> LoadedConfig:
    if getattr(args, "config", None):
        return load_config(args.config)
    upstream = getattr(args, "upstream", None) or "http://127.0.0.1:9000"
    listen = getattr(args, "listen", None) or "127.0.0.1:8080"
    return embedded_config(upstream, listen)


def run_serve(args: argparse.Namespace) -> int:
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
    if config and args.mode:
        print(
            "mendpoint serve: --mode sets the embedded default's mode (with --upstream); "
            "with a config file (--config, MENDPOINT_CONFIG), set each route's mode: in it",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if config:
        loaded = load_config(config)
    else:
        assert upstream is not None
        mode = args.mode or env.get("MENDPOINT_MODE")
        loaded = embedded_config(upstream, listen or "127.0.0.1:8080", mode=mode)
    log_spec = loaded.config.log
    try:
        level, fmt = chosen(args.log_level, log_spec.level, log_spec.format)
    except ValueError as exc:
        print(f"mendpoint serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(level, fmt, log_spec.access)
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
        process_tuning.resume()  # the supervisor never reaches settle()
        argv = [sys.executable, "-m", "gateway"]
        if args.log_level:
            argv += ["--log-level", args.log_level]
        argv += ["serve", "--admin", "off"]
        argv += ["--config", config] if config else ["--upstream", str(upstream)]
        argv += ["--mode", args.mode] if args.mode else []
        listen_address = listen or loaded.config.listen
        with contextlib.suppress(KeyboardInterrupt):
            return supervisor.supervise(
                processes,
                argv,
                listen_address,
                admin_address,
                loaded,
                config,
            )
        return EXIT_OK
    with contextlib.suppress(KeyboardInterrupt):
        process_tuning.run(serve_forever(loaded, listen, admin_address, config_path=config))
    return EXIT_OK
