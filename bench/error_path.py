"""The enrichment step of the `error-32` workload, in process: µs per failure, cache on and off.

The config is the benchmark's own (`bench/fixtures.py`: the shipped packs, 50 custom rules, a
20-skill catalog, additive mode); the failure is nginx's 400 the workload gets, with the
headers nginx sends, for the catalog's `reader` caller. Each request gets a fresh
`Observation` and context, as on the proxy's failure path (`Enricher.response`). The rows are
`uncached` (every failure classified, resolved and rendered) and `cached` (the answer cache
warm: what a repeated failure costs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from multidict import CIMultiDict, CIMultiDictProxy

from bench import fixtures
from gateway.classify import Observation, ObservationKind
from gateway.config.loader import load_config
from gateway.enrich.step import Enricher, FailureContext
from gateway.exchange.answer import Answers, RouteAnswers
from gateway.failure import Mode
from gateway.http.cached_answers import CachedAnswers
from gateway.resolve.callers import Caller
from gateway.resolve.service import Situation
from gateway.telemetry.logs import AccessNotes, AccessRecord
from gateway.telemetry.metrics import FailureMetrics

HEADERS = CIMultiDictProxy(
    CIMultiDict(
        {
            "Server": "nginx",
            "Date": "Tue, 01 Dec 2026 03:00:00 GMT",
            "Content-Type": "application/json",
            "Content-Length": str(len(fixtures.ERROR_BODY)),
            "Connection": "keep-alive",
        }
    )
)
CALLER = Caller("reader", frozenset({"data:read"}))
JSON_CLIENTS = RouteAnswers(json_clients=True)


def enricher(root: Path, cache: bool) -> CachedAnswers:
    config = fixtures.mendpoint_config(
        "http://127.0.0.1:9", fixtures.Variant("additive", access_log=False)
    )
    path = root / "bench.yaml"
    path.write_text(json.dumps(config))
    loaded = load_config(str(path))
    # The observers a gateway declares for a route without capture: the access record, metrics.
    step = Enricher.build(loaded, (AccessNotes(), FailureMetrics()))
    built = CachedAnswers.build(loaded, Answers(step))
    if not cache:
        built.answers = None
    return built


async def one(step: CachedAnswers, n: int) -> None:
    obs = Observation(
        route="api",
        method="GET",
        path=fixtures.ERROR_PATH,
        kind=ObservationKind.STATUS,
        status=fixtures.ERROR_STATUS,
        headers=HEADERS,
        body=fixtures.ERROR_BODY.encode(),
        content_type="application/json",
    )
    request_id = f"{n:032x}"
    ctx = FailureContext(
        route="api",
        mode=Mode.ADDITIVE,
        request_id=request_id,
        caller=CALLER,
        situation=Situation(operation="GET /v1/csv/normalize", route="api"),
        started=time.monotonic(),
        notes=AccessRecord(request_id, "GET", fixtures.ERROR_PATH, time.monotonic()),
    )
    rendering = await step.response(obs, ctx, JSON_CLIENTS)
    assert rendering is not None and rendering.body is not None


async def median_us(step: CachedAnswers, loops: int, rounds: int) -> float:
    await one(step, 0)
    per_call = []
    for r in range(rounds):
        begun = time.process_time()
        for i in range(loops):
            await one(step, r * loops + i)
        per_call.append((time.process_time() - begun) / loops * 1e6)
    return statistics.median(per_call)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        steps = {label: enricher(Path(tmp), label == "cached") for label in ("uncached", "cached")}

        async def run() -> dict[str, float]:
            return {k: await median_us(s, args.loops, args.rounds) for k, s in steps.items()}

        result = asyncio.run(run())
    json.dump({"median_cpu_us": result}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
