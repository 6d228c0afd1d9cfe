"""How a serving process runs: which event loop, and how the garbage collector is tuned.

Both are measured levers (docs/performance.md), not guesses:

- **uvloop**, when it is installed, is the event loop: its transports cost less per request
  than asyncio's selector loop. `MENDPOINT_LOOP=asyncio` forces the standard loop.
- **The cyclic GC** otherwise keeps walking everything built at start-up (modules, the
  config, compiled rules) although none of it will ever be garbage. `settle()` runs once the
  listeners are up: one full collection, then `gc.freeze()` moves the survivors out of the
  collector's sight, and a higher generation-0 threshold makes collections rarer (request
  garbage is mostly freed by reference counting, not by the collector).
  Until then (`starting()`) the collector does not run at all: start-up builds some 65,000
  objects that stay (modules, pydantic's models, the config, compiled rules) and left few
  cycles behind (about 1,800 at `settle()`), yet the collector walked them in some 170
  collections before the listeners were up, 40 to 60 ms of CPU per start of about 0.45 s.
  `MENDPOINT_GC=default` leaves the collector as Python ships it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import Callable, Coroutine, Iterator
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


def _tuned() -> bool:
    return os.environ.get("MENDPOINT_GC", "").strip().lower() != "default"


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """No cyclic collection while a process starts, until `settle()` (or `resume()`, in a
    process that never serves) turns the collector back on; leaving this block turns it on
    in any case, so a command that returns early (a usage error) leaves it as it found it."""
    held = _tuned() and gc.isenabled()
    if held:
        gc.disable()
    try:
        yield
    finally:
        if held:
            gc.enable()


def resume() -> None:
    """The collector back on, as Python ships it (a supervisor: it builds little, and never
    reaches `settle()`)."""
    gc.enable()


def settle() -> None:
    """After start-up: freeze what exists into the permanent generation, collect less often,
    and turn the collector back on (`starting()` held it)."""
    if not _tuned():
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
    gc.enable()
