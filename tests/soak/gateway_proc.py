"""The gateway under soak, in its own process so its RSS, descriptors and tasks are its own.

Prints `LISTEN host port` once listening, then one JSON line of vitals a second, until SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from gateway.config.loader import load_config
from gateway.serve.app import GatewayServer


def vitals(server: GatewayServer) -> dict[str, int]:
    status = Path("/proc/self/status").read_text().splitlines()
    rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    http = server.runner.server
    return {
        "rss": rss_kib * 1024,
        "fds": len(os.listdir("/proc/self/fd")),
        "tasks": len(asyncio.all_tasks()),
        "connections": len(http.connections) if http is not None else 0,
    }


async def main(config_path: str) -> None:
    server = GatewayServer(load_config(config_path), config_path=config_path)
    host, port = await server.start("127.0.0.1:0")
    print(f"LISTEN {host} {port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    while not stop.is_set():
        print(json.dumps(vitals(server)), flush=True)
        try:
            async with asyncio.timeout(1):
                await stop.wait()
        except TimeoutError:
            pass
    await server.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
