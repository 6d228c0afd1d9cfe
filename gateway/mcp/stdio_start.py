"""Starting `mendpoint stdio`: the server first, the relay next, the config loading beside it.

An MCP host starts a stdio server per chat and waits for its `initialize` answer, so what the
gateway does before relaying is paid on every chat (docs/performance.md#mcp-start-up). The
server is spawned first, by the command line before it imports this (`spawn.py`); then the
config file is read as YAML only, enough for the two limits
the relay needs (`config/relay_limits.py`), and the relay starts while a thread loads the
rest (the models, the rule packs, the enrichment step). Only a response that may need
upgrading waits for it. A config that does not load ends the relay and the server and raises
its `ConfigError`, with the same FILE:LINE text as ever; a response relayed before that was
the server's own.
"""

from __future__ import annotations

import asyncio
import contextlib
from asyncio import FIRST_COMPLETED
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.config.relay_limits import RelayLimits
from gateway.failure import Mode
from gateway.mcp.child import Child
from gateway.mcp.spawn import Spawned
from gateway.mcp.stdio import FailureLog, StdioRelay

if TYPE_CHECKING:
    from gateway.config.loaded import LoadedConfig
    from gateway.mcp.upgrade import Upgrader


@dataclass(frozen=True, slots=True)
class StdioConfig:
    """What the relay knows of its config before loading it, and how to load the rest."""

    limits: RelayLimits | None
    """None when only the models can tell (relay_limits.early_limits): the relay waits."""
    load: Callable[[], LoadedConfig]
    """The whole config; run in a thread, so it must not touch the event loop."""
    quiet: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    """Held while that thread loads: the command line's `process_tuning.starting`, which rests
    the cyclic collector (about 120 collections, 28 ms of the thread's ~0.26 s of CPU, walking
    models and rules that stay) and turns it back on once the step is built."""


def serve_stdio(
    spawned: Spawned,
    read: Callable[[], StdioConfig],
    mode: Mode,
    grace_s: float | None = None,
) -> int:
    """Relay to the started server until it exits; its status is ours. `read` runs first,
    and raises `ConfigError` for a file that cannot be read or parsed."""
    try:
        config = read()
    except BaseException:
        spawned.abandon()
        raise
    return asyncio.run(_main(spawned, config, mode, grace_s))


async def _main(spawned: Spawned, config: StdioConfig, mode: Mode, grace_s: float | None) -> int:
    upgrader = asyncio.ensure_future(asyncio.to_thread(_upgrader, config))
    try:
        limits = config.limits or RelayLimits.of((await asyncio.shield(upgrader)).settings)
    except BaseException:
        spawned.abandon()
        await _closed(upgrader)
        raise
    child = await Child.attach(spawned, limits.max_message_bytes)
    running = asyncio.ensure_future(StdioRelay(child, limits, upgrader, mode, grace_s).run())
    try:
        await asyncio.wait({running, upgrader}, return_when=FIRST_COMPLETED)
        if not running.done() and upgrader.exception() is not None:
            running.cancel()  # the relay ends its server on the way out
        await asyncio.wait({running})
    finally:
        running.cancel()
        await _closed(upgrader)
    failed = upgrader.exception()
    if failed is not None:
        raise failed  # the config's ConfigError, even when the server had exited first
    return running.result()


async def _closed(upgrader: asyncio.Future[Upgrader]) -> None:
    """Let the loading thread finish (a thread cannot be cancelled), then close what it built."""
    await asyncio.wait({upgrader})
    if not upgrader.cancelled() and upgrader.exception() is None:
        await upgrader.result().enricher.close()


def _upgrader(config: StdioConfig) -> Upgrader:
    """The config and its enrichment step, built off the event loop: most of what they cost
    is importing the models and the rule engine."""
    with config.quiet():
        from gateway.enrich.step import Enricher
        from gateway.mcp.upgrade import Upgrader

        loaded = config.load()
        return Upgrader(Enricher.build(loaded, (FailureLog(),)), loaded.config.mcp)
