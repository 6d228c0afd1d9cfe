"""`mendpoint serve --workers N`: a supervisor and N worker processes sharing one port.

Real processes on loopback in front of a real aiohttp upstream. The tests check that the
workers serve and the kernel spreads connections over them; that /metrics on the
supervisor's admin port adds up over every worker (and over a worker that was killed); that
SIGHUP reaches every worker; that SIGTERM drains and leaves no process or metrics directory
behind; that a killed worker is replaced and a killed supervisor leaves no orphan; that a bad
config fails as it does without workers; and that `--workers 1` is the single process of old.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from gateway.cli import main
from gateway.serve import worker_process, workers
from gateway.telemetry.multiprocess import retire_worker
from tests.support.agents import EXPECTED, counts_by_code, orders_app, run_all
from tests.support.gateway import StartUpstream
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.secrets import write_secret
from tests.support.waits import patience

ROOT = REPO
pytestmark = pytest.mark.skipif(not workers.supported(), reason="--workers needs Linux")


# --- helpers --------------------------------------------------------------------------------


@dataclass
class Gateway:
    process: asyncio.subprocess.Process
    base: str
    admin: str
    log: Path
    tmp: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


async def launch(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    with (tmp_path / "gateway.log").open("ab") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway",
            *args,
            cwd=tmp_path,
            # TMPDIR: where the supervisor makes its metrics directory, so a test can look.
            env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp), **(env or {})},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )


def config(upstream: str, port: int, admin: int, **extra: Any) -> dict[str, Any]:
    return {
        "listen": f"127.0.0.1:{port}",
        "admin": f"127.0.0.1:{admin}",
        "routes": [{"name": "api", "upstream": upstream}],
        "rules": [
            {
                "id": "gone",
                "match": {"status": [410]},
                "error": {"code": "FIRST", "category": "NOT_FOUND"},
            }
        ],
        "log": {"access": False},
        "shutdown": {"drain_delay_s": 0.6, "grace_s": 10},
        **extra,
    }


@pytest.fixture
async def start_workers(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Gateway]]]:
    started: list[Gateway] = []

    async def start(data: dict[str, Any], *args: str) -> Gateway:
        path = tmp_path / "gateway.yaml"
        path.write_text(yaml.safe_dump(data))
        process = await launch(tmp_path, "serve", "--config", str(path), *args)
        gateway = Gateway(
            process,
            f"http://{data['listen']}",
            f"http://{data['admin']}",
            tmp_path / "gateway.log",
            tmp_path / "tmp",
        )
        started.append(gateway)
        await wait_ready(gateway)
        return gateway

    yield start
    for gateway in started:
        if gateway.process.returncode is None:
            gateway.process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(gateway.process.wait(), 15)
            except TimeoutError:
                gateway.process.kill()
                await gateway.process.wait()


async def readyz(gateway: Gateway) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(gateway.admin + "/readyz") as response,
    ):
        body: dict[str, Any] = await response.json()
        return response.status, body


async def wait_ready(gateway: Gateway, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + patience(timeout_s)
    while time.monotonic() < deadline:
        assert gateway.process.returncode is None, gateway.log_text()
        with contextlib.suppress(aiohttp.ClientConnectionError):
            status, body = await readyz(gateway)
            if status == 200:
                return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"never ready:\n{gateway.log_text()}")


def worker_pids(body: dict[str, Any]) -> list[int]:
    return [int(w["pid"]) for w in body.get("workers", []) if w["pid"] is not None]


async def fresh_get(url: str) -> tuple[int, dict[str, Any]]:
    """One request on a connection of its own, so the kernel picks a worker for each."""
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
        session.get(url) as response,
    ):
        body = await response.json() if response.status >= 400 else {}
        return response.status, body


async def scrape(gateway: Gateway) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(gateway.admin + "/metrics") as r,
    ):
        assert r.status == 200
        return await r.text()


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of every sample of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(3))
    return total


def alive(pid: int) -> bool:
    """Running, and not a zombie waiting for a parent that may not reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_gone(pids: list[int], timeout_s: float = 15) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, [p for p in pids if alive(p)]
        await asyncio.sleep(0.05)


def children_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def owner_of_port(port: int, upstream_port: int, pids: list[int]) -> int | None:
    """Which of `pids` holds the loopback connection from local `port` to the upstream."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1].split(":"), fields[2].split(":")
        if int(local[1], 16) == port and int(remote[1], 16) == upstream_port:
            inode = fields[9]
    if inode is None:
        return None
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                        return pid
    return None


def upstream_app(seen: list[int] | None = None, pids: list[int] | None = None) -> web.Application:
    """404 with a message for /missing/N, 410 for the rest; /slow first waits a second.

    With `seen` and `pids`, records which gateway worker sent each request.
    """

    async def handler(request: web.Request) -> web.Response:
        if seen is not None and pids is not None:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            sock = request.transport.get_extra_info("sockname") if request.transport else None
            if peer and sock:
                owner = owner_of_port(int(peer[1]), int(sock[1]), pids)
                if owner is not None:
                    seen.append(owner)
        if request.path == "/slow":
            await asyncio.sleep(1.0)
        if request.path.startswith("/missing/"):
            return web.json_response({"message": f"Item {request.path} does not exist"}, status=404)
        if request.path == "/ok":
            return web.Response(text="ok")
        return web.json_response({"message": "gone"}, status=410)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


# --- serving and metrics ---------------------------------------------------------------------


async def test_workers_share_the_port_and_metrics_add_up(
    start_upstream: StartUpstream, start_workers: Callable[..., Awaitable[Gateway]]
) -> None:
    seen: list[int] = []
    pids: list[int] = []
    upstream = await start_upstream(upstream_app(seen, pids))
    # `workers:` from the config file this time; the other tests use the flag.
    gateway = await start_workers(config(upstream, free_port(), free_port(), workers=2))
    body = await wait_ready(gateway)
    pids.extend(worker_pids(body))
    assert len(pids) == 2 and all(alive(p) for p in pids)
    assert [w["ready"] for w in body["workers"]] == [True, True]

    failures, successes = 30, 10
    results = await asyncio.gather(
        *(fresh_get(f"{gateway.base}/missing/{i}") for i in range(failures)),
        *(fresh_get(f"{gateway.base}/ok") for _ in range(successes)),
    )
    assert sorted(status for status, _ in results) == [200] * successes + [404] * failures
    assert all(body["error"]["code"] == "NOT_FOUND" for status, body in results if status == 404)
    assert set(seen) == set(pids), f"the kernel gave every connection to one worker: {seen}"

    text = await scrape(gateway)
    assert sample(text, "mendpoint_requests_total") == failures + successes
    assert sample(text, "mendpoint_requests_total", status_class="4xx") == failures
    assert sample(text, "mendpoint_failures_total", rule="http-404") == failures
    assert sample(text, "mendpoint_upstream_latency_seconds_count") == failures + successes
    assert sample(text, "mendpoint_in_flight_requests") == 0
    assert sample(text, "mendpoint_ready") == 1
    assert sample(text, "mendpoint_workers", state="ready") == 2
    assert sample(text, "mendpoint_worker_restarts_total") == 0
    assert 'pid="' not in text  # every gauge combines; none is per process
    families = re.findall(r"^# TYPE (\S+)", text, re.MULTILINE)
    assert len(families) == len(set(families)), "a metric family appears twice"

    async with aiohttp.ClientSession() as session:
        async with session.get(gateway.admin + "/gaps?limit=5") as response:
            gaps = (await response.json())["signatures"]
        async with session.get(gateway.base + "/metrics") as response:
            assert response.status == 410  # the data port proxies it; the workers have no admin
    assert [{k: row[k] for k in ("route", "status", "signature", "count")} for row in gaps] == [
        {
            "route": "api",
            "status": "404",
            "signature": "Item /missing/# does not exist",
            "count": 30,
        }
    ]
    assert gaps[0]["covered_by"] is None  # the supervisor's own config decides it
    assert gaps[0]["sample"]["status"] == 404


async def test_follow_ups_are_matched_whichever_worker_receives_them(
    start_upstream: StartUpstream, start_workers: Callable[..., Awaitable[Gateway]]
) -> None:
    """The scripted agents of tests/feedback/test_followups.py through two workers: the same
    exact counts."""
    seen: list[int] = []
    pids: list[int] = []

    def note(request: web.Request) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        owner = owner_of_port(int(peer[1]), int(sock[1]), pids) if peer and sock else None
        if owner is not None:
            seen.append(owner)

    upstream = await start_upstream(orders_app(note))
    data = config(upstream, free_port(), free_port(), followups={"window_s": 2.0})
    gateway = await start_workers(data, "--workers", "2")
    pids.extend(worker_pids(await wait_ready(gateway)))
    await run_all(gateway.base)
    await asyncio.sleep(2.6)  # every failure's window has passed: the rest are abandoned
    async with (
        aiohttp.ClientSession() as session,
        session.get(gateway.admin + "/followups") as response,
    ):
        table = await response.json()
    assert set(seen) == set(pids), f"one worker served every request: {seen}"
    assert table["window_s"] == 2.0
    assert counts_by_code(table["codes"]) == EXPECTED
    text = await scrape(gateway)
    for code, row in EXPECTED.items():
        for outcome, count in row.items():
            if outcome != "failures":
                found = sample(text, "mendpoint_followups_total", code=code, outcome=outcome)
                assert found == count, (code, outcome)


# --- signals ---------------------------------------------------------------------------------


async def test_sighup_reaches_every_worker_and_sigterm_drains_them(
    start_upstream: StartUpstream, start_workers: Callable[..., Awaitable[Gateway]]
) -> None:
    upstream = await start_upstream(upstream_app())
    data = config(upstream, free_port(), free_port())
    gateway = await start_workers(data, "--workers", "2")
    pids = worker_pids(await wait_ready(gateway))
    _, first = await fresh_get(gateway.base + "/a")
    assert first["error"]["code"] == "FIRST"

    data["rules"][0]["error"]["code"] = "SECOND"
    (gateway.log.parent / "gateway.yaml").write_text(yaml.safe_dump(data))
    assert gateway.process.pid is not None
    gateway.process.send_signal(signal.SIGHUP)
    deadline, in_a_row = time.monotonic() + patience(15), 0
    while in_a_row < 24:  # a worker left on the old config would show within a few of these
        assert time.monotonic() < deadline, "SIGHUP did not reach every worker"
        _, body = await fresh_get(gateway.base + "/a")
        in_a_row = in_a_row + 1 if body["error"]["code"] == "SECOND" else 0
    text = await scrape(gateway)
    assert sample(text, "mendpoint_config_reloads_total", result="success") >= 2

    async with aiohttp.ClientSession() as session:
        in_flight = asyncio.create_task(session.get(gateway.base + "/slow"))
        await asyncio.sleep(0.3)
        gateway.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.2)
        status, body = await readyz(gateway)
        assert status == 503 and body["status"] == "not ready"  # draining
        _, during = await fresh_get(gateway.base + "/a")  # still accepting in the drain delay
        assert during["error"]["code"] == "SECOND"
        response = await in_flight
        assert response.status == 410
        response.release()
    assert await asyncio.wait_for(gateway.process.wait(), 30) == 0, gateway.log_text()
    await wait_gone(pids, timeout_s=2)
    assert not list(gateway.tmp.glob("mendpoint-metrics-*")), "metrics directory left behind"
    assert "Traceback" not in gateway.log_text()


# --- failures --------------------------------------------------------------------------------


async def test_a_killed_worker_is_replaced_and_a_killed_supervisor_leaves_none(
    start_upstream: StartUpstream, start_workers: Callable[..., Awaitable[Gateway]]
) -> None:
    upstream = await start_upstream(upstream_app())
    gateway = await start_workers(config(upstream, free_port(), free_port()), "--workers", "2")
    before = await wait_ready(gateway)
    for i in range(20):
        assert (await fresh_get(f"{gateway.base}/missing/{i}"))[0] == 404

    victim = before["workers"][0]["pid"]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + patience(20)
    while True:
        assert time.monotonic() < deadline, gateway.log_text()
        status, after = await readyz(gateway)
        slot = after["workers"][0]
        if status == 200 and slot["pid"] not in (None, victim):
            break
        await asyncio.sleep(0.05)
    assert slot["restarts"] == 1 and after["workers"][1]["pid"] == before["workers"][1]["pid"]
    assert not alive(victim)

    for i in range(10):
        assert (await fresh_get(f"{gateway.base}/missing/{i}"))[0] == 404
    text = await scrape(gateway)
    assert sample(text, "mendpoint_requests_total") == 30  # the dead worker's counts stay
    assert sample(text, "mendpoint_worker_restarts_total") == 1
    assert sample(text, "mendpoint_workers", state="running") == 2
    assert "worker 0 killed by SIGKILL unexpectedly" in gateway.log_text()
    # The dead worker's files were folded into one archive per type.
    (metrics_dir,) = gateway.tmp.glob("mendpoint-metrics-*")
    assert not list(metrics_dir.glob(f"*_{victim}.db"))
    assert (metrics_dir / "counter_archive.db").exists()

    # Now the supervisor dies without a word: no worker may outlive it.
    gateway.process.kill()
    await gateway.process.wait()
    await wait_gone(worker_pids(after), timeout_s=15)  # each saw its link close and stopped
    assert gateway.log_text().count("the supervisor is gone; stopping") == 2


async def test_a_bad_config_fails_before_any_worker_starts(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("routes:\n  - name: api\n    upstream: http://127.0.0.1:9\n    mode: loud\n")
    process = await launch(tmp_path, "serve", "--config", str(path), "--workers", "2")
    assert await asyncio.wait_for(process.wait(), 30) == 1
    log = (tmp_path / "gateway.log").read_text()
    assert f"{path}:4: routes[0].mode:" in log
    assert "worker" not in log and "Traceback" not in log


async def test_a_port_in_use_fails_start_up(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = await launch(
            tmp_path,
            "serve",
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            f"127.0.0.1:{port}",
            "--admin",
            "off",
            "--workers",
            "2",
        )
        assert await asyncio.wait_for(process.wait(), 30) == 1
    log = (tmp_path / "gateway.log").read_text()
    assert "Address already in use" in log and "worker 0 started" not in log
    assert not list((tmp_path / "tmp").glob("mendpoint-metrics-*"))


# --- one process, as before ------------------------------------------------------------------


async def test_workers_1_is_the_single_process_of_old(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(upstream_app())
    port, admin = free_port(), free_port()
    process = await launch(
        tmp_path,
        "serve",
        "--upstream",
        upstream,
        "--listen",
        f"127.0.0.1:{port}",
        "--admin",
        f"127.0.0.1:{admin}",
        "--workers",
        "1",
        env={"MENDPOINT_WORKERS": "4"},  # the flag wins
    )
    gateway = Gateway(
        process,
        f"http://127.0.0.1:{port}",
        f"http://127.0.0.1:{admin}",
        tmp_path / "gateway.log",
        tmp_path,
    )
    try:
        body = await wait_ready(gateway)
        assert body == {"status": "ready"}
        assert (await fresh_get(gateway.base + "/missing/1"))[0] == 404
        assert children_of(process.pid) == []
        text = await scrape(gateway)
        assert sample(text, "mendpoint_requests_total") == 1
        assert "mendpoint_workers" not in text
    finally:
        process.send_signal(signal.SIGINT)  # at a terminal: no drain delay
        assert await asyncio.wait_for(process.wait(), 15) == 0


# --- in-process units ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1), ("4", 4), (" auto ", "auto"), ("AUTO", "auto"), ("0", 0), ("1024", 1024)],
    ids=["one", "four", "auto-spaced", "auto-upper", "zero", "max"],
)
def test_worker_counts_parse(text: str, expected: workers.WorkerCount) -> None:
    assert workers.parse_count(text) == expected


@pytest.mark.parametrize("text", ["-1", "1025", "2.5", "lots", ""], ids=str)
def test_bad_worker_counts_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="must be auto or a whole number from 0 to 1024"):
        workers.parse_count(text)


def test_auto_and_zero_mean_one_per_usable_cpu() -> None:
    cpus = workers.usable_cpus()
    assert 1 <= cpus <= (os.cpu_count() or 1)
    assert workers.resolve_count("auto") == workers.resolve_count(0) == cpus
    assert workers.resolve_count(3) == 3


def test_backoff_doubles_to_a_ceiling() -> None:
    assert [worker_process.backoff_s(n) for n in range(1, 10)] == [
        0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"MENDPOINT_WORKERS": "lots"}, [], "mendpoint serve: MENDPOINT_WORKERS: 'lots' must be"),
        ({}, ["--workers", "-2"], "argument --workers: '-2' must be auto or a whole number"),
    ],
    ids=["env", "flag"],
)
def test_bad_worker_counts_are_usage_errors(
    env: dict[str, str],
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        code = main(["serve", "--upstream", "http://127.0.0.1:9", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


def test_a_bad_workers_key_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("workers: many\nroutes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n")
    assert main(["check", "--config", str(path)]) == 1
    assert f"{path}:1: workers: Value error, must be auto or a whole number" in (
        capsys.readouterr().err
    )


def write_values(path: Path, key: str, value: float) -> None:
    """A metrics file as a worker in multiprocess mode leaves it."""
    values = MmapedDict(str(path))  # type: ignore[no-untyped-call]
    values.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]
    values.close()  # type: ignore[no-untyped-call]


def read_values(path: Path) -> list[tuple[str, float]]:
    found = MmapedDict.read_all_values_from_file(str(path))  # type: ignore[no-untyped-call]
    return [(key, value) for key, value, _, _ in found]


def test_retiring_a_worker_folds_its_counts_into_the_archive(tmp_path: Path) -> None:
    key = mmap_key("mendpoint_requests", "mendpoint_requests_total", ["route"], ["api"], "help")
    write_values(tmp_path / "counter_101.db", key, 3.0)
    write_values(tmp_path / "counter_102.db", key, 4.0)
    write_values(tmp_path / "gauge_livesum_101.db", key, 1.0)

    retire_worker(str(tmp_path), 101)
    retire_worker(str(tmp_path), 102)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter_archive.db"]
    assert read_values(tmp_path / "counter_archive.db") == [(key, 7.0)]


def test_stale_metrics_directories_are_swept(tmp_path: Path) -> None:
    stale, held, young = (tmp_path / f"{workers.METRICS_PREFIX}{n}" for n in "abc")
    for directory in (stale, held, young):
        directory.mkdir()
        (directory / workers.LOCK_NAME).touch()
        (directory / "counter_1.db").touch()
    old = time.time() - 3600
    for directory in (stale, held):
        os.utime(directory, (old, old))
    with (held / workers.LOCK_NAME).open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live supervisor's
        workers.sweep_stale(str(tmp_path))
    assert not stale.exists() and held.exists() and young.exists()


async def test_the_supervisors_gaps_window_close_after_a_reload_and_reset(
    start_upstream: StartUpstream, start_workers: Callable[..., Awaitable[Gateway]], tmp_path: Path
) -> None:
    """/gaps under `--workers 2`: each worker's window summed with a sample, `covered_by`
    decided by the supervisor's own config (reloaded on SIGHUP as the workers reload theirs),
    and `POST /gaps/reset` forwarded to every worker, with the admin token only."""
    upstream = await start_upstream(upstream_app())
    token = "0123456789abcdef0123456789abcdef"
    tokens = write_secret(tmp_path / "admin-token", token + "\n")
    data = config(upstream, free_port(), free_port(), admin_token_file=str(tokens))
    gateway = await start_workers(data, "--workers", "2")
    await asyncio.gather(*(fresh_get(f"{gateway.base}/missing/{i}") for i in range(6)))
    bearer = {"Authorization": f"Bearer {token}"}

    async def gaps() -> list[dict[str, Any]]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(gateway.admin + "/gaps?window_s=600", headers=bearer) as answer,
        ):
            rows: list[dict[str, Any]] = (await answer.json())["signatures"]
            return rows

    (row,) = await gaps()
    assert (row["count"], row["covered_by"], row["sample"]["status"]) == (6, None, 404)
    rule = {
        "id": "missing-item",
        "match": {"status": [404], "path": "/missing/*"},
        "error": {"code": "MISSING_ITEM", "category": "NOT_FOUND"},
    }
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump({**data, "rules": [rule]}))
    gateway.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + patience(15)
    while (await gaps())[0]["covered_by"] != "missing-item":
        assert time.monotonic() < deadline, "the supervisor never saw the new rule"
        await asyncio.sleep(0.2)
    async with aiohttp.ClientSession() as session:
        async with session.post(gateway.admin + "/gaps/reset") as answer:
            assert answer.status == 401
        async with session.post(gateway.admin + "/gaps/reset", headers=bearer) as answer:
            assert (answer.status, await answer.json()) == (
                200,
                {"reset": True, "scope": "workers"},
            )
    assert await gaps() == []
