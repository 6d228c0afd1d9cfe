"""The route work of one `mcp-16` tool call, in process: µs of CPU per reply, by kind and mode.

The config is the `mcp-16` rows' own (`bench/mcp_bench.py`: the HTTP rows' packs, 50 custom
rules and 20 skills, one `type: mcp` route); the replies are what `bench/mcp_server.py`
sends: a note, or the Node ENOENT tool error, each failure naming its own path as in the
workload (so no two failures are the same text). Each reply goes through the route's real
rewrite (`mcp.tracking.rewrite_payload`: the byte test, the parse, the enrichment step, the
upgraded result and its encoding) with a fresh request table, access record and context, as
the Streamable HTTP handler gives it; the unmatched-signature book is shared, as the app's is.
Rows: `failure` and `success`, in `additive` and `original` mode; `--profile` prints where a
failure's µs go instead.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.mcp_bench import mendpoint_config
from bench.mcp_server import PATH, TOOL, answer, dump, missing_path, ok_path
from gateway.classify.redact import Redactor
from gateway.config.loader import load_config
from gateway.enrich.step import Enricher, FailureContext
from gateway.failure import Mode
from gateway.feedback.signatures import SignatureBook, SignatureObserver
from gateway.mcp.correlation import Tracker, rewrite_payload
from gateway.mcp.jsonrpc import Pending, RequestTable, request_key
from gateway.mcp.upgrade import Upgrader
from gateway.resolve.callers import ANONYMOUS
from gateway.resolve.service import Situation
from gateway.telemetry.logs import AccessNotes, AccessRecord
from gateway.telemetry.metrics import FailureMetrics

ROUTE = "tools"
PENDING = Pending("tools/call", TOOL)


@dataclass(frozen=True, slots=True)
class BenchSite:
    """The `CallSite` of one POST to the route, as `HttpCallSite` gives it."""

    mode: Mode
    record: AccessRecord
    route_name: str = ROUTE
    path: str = PATH
    idempotent: bool = False

    def failure_context(self, situation: Situation) -> FailureContext:
        return FailureContext(
            route=ROUTE,
            mode=self.mode,
            request_id=self.record.request_id,
            caller=ANONYMOUS,
            situation=situation,
            started=self.record.started,
            notes=self.record,
        )


def upgrader(root: Path, mode: str) -> Upgrader:
    path = root / f"mcp-{mode}.yaml"
    path.write_text(json.dumps(mendpoint_config("http://127.0.0.1:9", mode)))
    loaded = load_config(str(path))
    # The observers a gateway declares for a route without capture.
    redactor = Redactor.build(loaded.config.redaction)
    observers = (AccessNotes(), FailureMetrics(), SignatureObserver(SignatureBook(), redactor))
    return Upgrader(Enricher.build(loaded, observers), loaded.config.mcp)


def reply(n: int, failing: bool) -> bytes:
    """The server's bytes for call `n` (ids from 1, as the load's)."""
    path = missing_path(n) if failing else ok_path(n)
    call = {"jsonrpc": "2.0", "id": n, "method": "tools/call"}
    params = {"name": TOOL, "arguments": {"path": path}}
    message = answer({**call, "params": params})
    assert message is not None
    return dump(message)


async def one(step: Upgrader, mode: Mode, n: int, raw: bytes) -> bytes | None:
    table = RequestTable(64)
    key = request_key(n)
    assert key is not None
    table.add(key, PENDING)
    record = AccessRecord(f"{n:032x}", "POST", PATH, time.monotonic())
    site = BenchSite(mode, record)
    new, _ = await rewrite_payload(raw, Tracker(table, None), step, site)
    return new


async def median_us(step: Upgrader, mode: Mode, failing: bool, loops: int, rounds: int) -> float:
    replies = [reply(i + 1, failing) for i in range(loops)]
    await one(step, mode, 1, replies[0])
    per_call = []
    for _ in range(rounds):
        begun = time.process_time()
        for i, raw in enumerate(replies):
            await one(step, mode, i + 1, raw)
        per_call.append((time.process_time() - begun) / loops * 1e6)
    return statistics.median(per_call)


def check(steps: dict[str, Upgrader]) -> None:
    """A broken setup is never measured: the failure is upgraded in additive mode, classified
    by the shipped ENOENT rule, and a success goes out untouched."""
    new = asyncio.run(one(steps["additive"], Mode.ADDITIVE, 7, reply(7, True)))
    assert new is not None and b"FILE_NOT_FOUND" in new, new
    assert asyncio.run(one(steps["additive"], Mode.ADDITIVE, 8, reply(8, False))) is None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile additive failures")
    args = parser.parse_args()
    steps = build()
    check(steps)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(median_us(steps["additive"], Mode.ADDITIVE, True, args.loops, 1))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
        return 0

    json.dump({"median_cpu_us": asyncio.run(measure(steps, args.loops, args.rounds))}, sys.stdout)
    print()
    return 0


def build() -> dict[str, Upgrader]:
    """The route's step in `additive` and `original` mode, with the `mcp-16` config."""
    with tempfile.TemporaryDirectory() as tmp:
        return {mode: upgrader(Path(tmp), mode) for mode in ("additive", "original")}


async def measure(steps: dict[str, Upgrader], loops: int, rounds: int) -> dict[str, float]:
    """Median µs of CPU per reply: `failure additive`, `success additive`, and `original`."""
    rows = {}
    for mode in ("additive", "original"):
        for kind in ("failure", "success"):
            us = await median_us(steps[mode], Mode(mode), kind == "failure", loops, rounds)
            rows[f"{kind} {mode}"] = round(us, 1)
    return rows


if __name__ == "__main__":
    sys.exit(main())
