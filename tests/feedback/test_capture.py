"""A route's `capture:` in a real `mendpoint serve` process: only the failures no rule named
(`only: unmatched`), a directory that stays a ring across restarts (the oldest file makes
room), and what the bounds cost counted in `mendpoint_capture_dropped_total` and said in the
log at most once a minute."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from gateway.classify.redact import Redactor
from gateway.config.models import RedactionSpec
from gateway.config.route_model import CaptureSpec
from gateway.feedback.capture import SUFFIX, CapturedFailure, Captures, load_dir
from gateway.telemetry.metrics import REGISTRY
from tests.support.gateway import StartUpstream, start_process, stop_process, wait_ready
from tests.support.ports import free_port
from tests.support.waits import patience

LOG_LINE = "capture of route api:"


def items_app() -> web.Application:
    """`/items/N` answers 404 in words no rule of the config names; `/named` a 409 one does."""

    async def item(request: web.Request) -> web.Response:
        number = request.match_info["n"]
        return web.json_response({"message": f"item {number} is gone"}, status=404)

    async def named(request: web.Request) -> web.Response:
        return web.json_response({"message": "the order is locked"}, status=409)

    app = web.Application()
    app.router.add_get("/items/{n}", item)
    app.router.add_get("/named", named)
    return app


def capture_config(upstream: str, port: int, admin: int, captures: Path) -> dict[str, Any]:
    return {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [
            {
                "name": "api",
                "upstream": upstream,
                "capture": {"dir": str(captures), "max_files": 3},
            }
        ],
        "rules": [
            {
                "id": "order-locked",
                "match": {"status": [409]},
                "error": {"code": "ORDER_LOCKED", "category": "CONFLICT"},
            }
        ],
    }


def held_ids(captures: Path) -> list[str]:
    """The request ids the directory's files record, oldest first."""
    return [record["request_id"] for record in load_dir(str(captures))]


def holds(captures: Path, expected: list[str]) -> bool:
    """The directory holds exactly these, and no write is half done."""
    return held_ids(captures) == expected and not list(captures.glob("*.part"))


def held_bytes(captures: Path) -> int:
    return sum(f.stat().st_size for f in captures.glob(f"*{SUFFIX}"))


async def wait_for_ids(captures: Path, expected: list[str]) -> None:
    deadline = time.monotonic() + patience(10)
    while time.monotonic() < deadline:
        if holds(captures, expected):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the directory holds {held_ids(captures)}, not {expected}")


async def send(session: aiohttp.ClientSession, url: str, request_id: str) -> None:
    async with session.get(url, headers={"X-Request-Id": request_id}) as response:
        assert response.status >= 400
        await response.read()


async def dropped(session: aiohttp.ClientSession, admin: int) -> float:
    async with session.get(f"http://127.0.0.1:{admin}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith('mendpoint_capture_dropped_total{route="api"}'):
            return float(line.split()[-1])
    return 0.0


async def test_the_capture_directory_is_a_ring_of_what_no_rule_named(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(items_app())
    port, admin = free_port(), free_port()
    captures = tmp_path / "captures"
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(capture_config(upstream, port, admin, captures)))
    base = f"http://127.0.0.1:{port}"

    process = await start_process("serve", "--config", str(path))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz", process)
            for n in range(1, 3):
                await send(session, f"{base}/named", f"named-{n}")  # a rule of the config's
            for n in range(1, 9):
                await send(session, f"{base}/items/{n}", f"item-{n}")
            # The newest three: each failure past max_files replaced the oldest file.
            await wait_for_ids(captures, ["item-6", "item-7", "item-8"])
            assert await dropped(session, admin) == 5
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr
    lines = [line for line in stderr.splitlines() if LOG_LINE in line]
    assert len(lines) == 1, stderr  # once a minute at most, however many were replaced
    assert "1 oldest file(s) replaced" in lines[0]

    # A restart reads the directory again: the oldest by name still goes first.
    process = await start_process("serve", "--config", str(path))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"http://127.0.0.1:{admin}/readyz", process)
            await send(session, f"{base}/items/9", "item-9")
            await wait_for_ids(captures, ["item-7", "item-8", "item-9"])
            assert await dropped(session, admin) == 1
    finally:
        code, stderr = await stop_process(process)
    assert code == 0, stderr
    assert len(held_ids(captures)) == 3


def failure(number: int, body: bytes) -> CapturedFailure:
    return CapturedFailure(
        route="bytes",
        method="GET",
        path=f"/items/{number}",
        status=404,
        transport=None,
        headers={},
        body=body,
        request_id=f"r{number:03d}",
        rule="http-404",
        code="NOT_FOUND",
        default_rule=True,
        message="Not Found",
    )


async def test_max_bytes_is_a_ring_too_and_what_cannot_fit_is_counted(tmp_path: Path) -> None:
    spec = CaptureSpec(dir=str(tmp_path / "c"), max_bytes=4096, max_body_bytes=8192)
    captures, redactor = Captures(), Redactor.build(RedactionSpec())
    counted = REGISTRY.get_sample_value("mendpoint_capture_dropped_total", {"route": "bytes"})
    for number in range(12):
        assert captures.record(spec, failure(number, b"x" * 900), redactor, 0.0)
        await captures.flush()
        assert held_bytes(tmp_path / "c") <= spec.max_bytes
    kept = [record["request_id"] for record in load_dir(spec.dir)]
    assert kept == [f"r{n:03d}" for n in range(12 - len(kept), 12)]  # the newest, in order
    assert not captures.record(spec, failure(99, b"y" * 5000), redactor, 0.0)  # never fits
    await captures.close()
    after = REGISTRY.get_sample_value("mendpoint_capture_dropped_total", {"route": "bytes"})
    assert (after or 0) - (counted or 0) == 12 - len(kept) + 1
