"""The access log's background writer (docs/operations.md#logs): a request never waits for
the stream, a full queue drops lines and counts them, and a clean stop writes every line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path

import aiohttp
import yaml

from gateway.telemetry.access_writer import AccessWriter
from gateway.telemetry.metrics import REGISTRY
from tests.support.gateway import (
    StartUpstream,
    slow_gone_app,
    start_process,
    stop_process,
    wait_ready,
)
from tests.support.ports import free_port
from tests.support.waits import patience


def _dropped() -> float:
    return REGISTRY.get_sample_value("mendpoint_access_log_dropped_total") or 0.0


def test_a_stream_that_does_not_drain_never_blocks_a_line_and_a_full_queue_counts_drops() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    stream = os.fdopen(write_fd, "w", encoding="utf-8")
    writer = AccessWriter(stream, capacity=100, interval_s=0.01)
    filler = "x" * 1023
    before = _dropped()
    try:
        # Nobody reads the pipe: the writer thread blocks on it once its 64 KiB fill up.
        for _ in range(200):
            writer.put(filler)
        deadline = time.monotonic() + patience(10)
        while len(writer._lines) and time.monotonic() < deadline:
            time.sleep(0.01)  # the thread took what it could before blocking
        started = time.monotonic()
        for n in range(300):
            writer.put(f"line {n}")
        assert time.monotonic() - started < 0.5  # never waited for the stream
        assert _dropped() - before >= 200  # at most 100 held: the rest counted, not kept
    finally:
        received = bytearray()
        closer = threading.Thread(target=writer.close)
        closer.start()
        while True:
            done = not closer.is_alive()
            try:
                received += os.read(read_fd, 1 << 16)
            except BlockingIOError:
                if done:
                    break
                time.sleep(0.01)
        closer.join()
        stream.close()
        os.close(read_fd)
    lines = received.decode().splitlines()
    kept = [line for line in lines if line.startswith("line ")]
    assert kept == [f"line {n}" for n in range(len(kept))]  # in order, none torn
    assert len(kept) + (_dropped() - before) >= 300 - 1  # each line written or counted


async def test_sigterm_writes_every_access_line_before_the_process_exits(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """Lines still queued (the writer wakes every 50 ms) and the lines of requests the drain
    lets finish are all on stderr when the process has exited 0."""
    upstream = await start_upstream(slow_gone_app())
    port, admin = free_port(), free_port()
    config = {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "log": {"format": "json"},
        "routes": [{"name": "api", "upstream": upstream}],
        "shutdown": {"drain_delay_s": 0, "grace_s": 10},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    process = await start_process("serve", "--config", str(path))
    base = f"http://127.0.0.1:{port}"
    quick = 60
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz")
            slow = [asyncio.create_task(session.get(base + "/slow")) for _ in range(3)]
            for n in range(quick):
                async with session.get(f"{base}/x/{n}") as response:
                    assert response.status == 410
            process.send_signal(signal.SIGTERM)  # at once: the last lines are still queued
            for task in slow:
                response = await task
                assert response.status == 410
                response.release()
        # It exits on the one SIGTERM: stop_process's own would land in the interpreter's
        # teardown, after the loop's handlers are gone, and end it by the signal (-15).
        await asyncio.wait_for(process.wait(), patience(30))
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr[-2000:]
    access = [
        json.loads(line) for line in stderr.splitlines() if '"logger":"mendpoint.access"' in line
    ]
    paths = sorted(record["path"] for record in access)
    assert paths == sorted([f"/x/{n}" for n in range(quick)] + ["/slow"] * 3)
    assert stderr.rstrip().splitlines()[-1].endswith('"msg":"mendpoint stopped"}')
