"""How a serving process runs: which event loop, and how the garbage collector is tuned.

Both are measured levers (docs/performance.md), not guesses:

- **uvloop**, when it is installed, is the event loop: its transports cost less per request
  than asyncio's selector loop. `MENDPOINT_LOOP=asyncio` forces the standard loop.
- **The cyclic GC** otherwise keeps walking everything built at start-up (modules, the
  config, compiled rules) although none of it will ever be garbage. `settle()` runs once the
  listeners are up: one full collection, then `gc.freeze()` moves the survivors out of the
  collector's sight, and a higher generation-0 threshold makes collections rarer (request
  garbage is mostly freed by reference counting, not by the collector).
  `MENDPOINT_GC=default` leaves the collector as Python ships it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("mendpoint")

T = TypeVar("T")
GEN0_THRESHOLD = 20_000


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when installed and not turned off; None means asyncio's."""
    if os.environ.get("MENDPOINT_LOOP", "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`, on the loop `loop_factory` chooses."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def loop_name() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def settle() -> None:
    """After start-up: freeze what exists into the permanent generation, collect less often."""
    if os.environ.get("MENDPOINT_GC", "").strip().lower() == "default":
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
