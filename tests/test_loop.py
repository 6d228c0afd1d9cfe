"""Which event loop the suite runs on: `make test-uvloop` must really be on uvloop."""

from __future__ import annotations

import asyncio
import os

import pytest


@pytest.mark.skipif(
    os.environ.get("MENDPOINT_TEST_LOOP") != "uvloop", reason="only under make test-uvloop"
)
async def test_the_suite_runs_on_uvloop_when_asked() -> None:
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("uvloop")
