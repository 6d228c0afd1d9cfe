"""The `mendpoint` command: serve, check, explain, test, init, suggest, schema, resolver, stdio,
gaps and followups.

Every config problem is printed as `FILE:LINE: field: what is wrong` and exits with status 1;
no input, however bad, produces a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from gateway.cli.exits import EXIT_INVALID, EXIT_OK
from gateway.cli.parser import build_parser
from gateway.config.errors import ConfigError, Refused


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
    except (Refused, OSError) as exc:
        print(f"mendpoint: {exc}", file=sys.stderr)
        return EXIT_INVALID
