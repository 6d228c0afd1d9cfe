"""bench/error_path.py measures what docs/performance.md says: the error-32 failure enriched
by the benchmark's own config, with the answer cache off and warm."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import error_path


def test_the_cached_row_is_answered_from_the_cache(tmp_path: Path) -> None:
    cached = error_path.enricher(tmp_path, cache=True)
    uncached = error_path.enricher(tmp_path, cache=False)
    assert cached.answers is not None and uncached.answers is None

    async def run() -> tuple[float, float]:
        return (
            await error_path.median_us(cached, loops=20, rounds=1),
            await error_path.median_us(uncached, loops=20, rounds=1),
        )

    timings = asyncio.run(run())
    assert all(t > 0 for t in timings)
    assert len(cached.answers) == 1  # one failure, kept once and answered from then on
