"""`mendpoint check`, `explain`, `test` and `schema`: the rules and config, offline."""

from __future__ import annotations

import argparse
import asyncio
import sys

from multidict import CIMultiDict

from gateway.cli.exits import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from gateway.cli.serve_command import config_of
from gateway.config.errors import ConfigError
from gateway.config.loader import builtin_text, load_config
from gateway.failure import Mode, TransportKind
from gateway.offline.explain import Sample, explain, parse_header, render_explanation
from gateway.offline.fixtures import load_fixtures, run_fixtures
from gateway.offline.schema import schema_text
from gateway.resolve.callers import ANONYMOUS, CallerDirectory


def run_check(args: argparse.Namespace) -> int:
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


def _header_pairs(items: list[str], flag: str) -> CIMultiDict[str] | None:
    """`NAME:VALUE` arguments as headers; None (after saying why) when one is malformed."""
    headers: CIMultiDict[str] = CIMultiDict()
    for item in items:
        pair = parse_header(item)
        if pair is None:
            print(f"mendpoint explain: {flag} {item!r} must be NAME:VALUE", file=sys.stderr)
            return None
        headers.add(*pair)
    return headers


def run_explain(args: argparse.Namespace) -> int:
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
    loaded = config_of(args)
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
    sys.stdout.write(render_explanation(result))
    return EXIT_OK


def run_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text(args.kind))
    return EXIT_OK


def run_test(args: argparse.Namespace) -> int:
    loaded = config_of(args)
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
