"""`make run`: the command the Makefile runs starts the demo, the gateway and its admin listener
on the addresses given (DEMO_LISTEN, LISTEN, ADMIN) and prints the console's URL; Ctrl-C,
SIGTERM and SIGHUP stop both servers and leave no process behind; a taken port is one line
naming it; and the admin default is not a port a monitoring stack already uses
(docs/operations.md#admin-listener)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gateway.config.admin_address import DEFAULT_ADMIN
from gateway.config.models import GatewayConfig
from tests.support.paths import DOCS, REPO
from tests.support.ports import free_port
from tests.support.waits import patience

# Ports a host that runs a metrics or mesh stack is likely to have taken already: Prometheus
# and its Pushgateway/Alertmanager (9090-9094), the exporter allocations (9100-9999),
# OpenTelemetry (4317/4318 OTLP, 8888/8889 collector, 9464 Prometheus exporter, 13133 health),
# Envoy/Istio admin (9901, 15000-15090), Linkerd (4190/4191), Grafana 3000, the gateway's
# own data port 8080 and the demo's 9000.
TAKEN = (
    set(range(9090, 9095))
    | set(range(9100, 10000))
    | {3000, 4190, 4191, 4317, 4318, 8080, 8888, 8889, 9000, 9464, 13133}
    | set(range(15000, 15091))
)


def test_the_default_admin_port_is_not_a_monitoring_port() -> None:
    assert GatewayConfig.model_fields["admin"].default == DEFAULT_ADMIN
    port = int(DEFAULT_ADMIN.rpartition(":")[2])
    assert port not in TAKEN
    # The docs say the same (deploy/ is checked in tests/deploy/test_deploy.py).
    assert f"`{DEFAULT_ADMIN}`" in (DOCS / "configuration.md").read_text()
    assert f"`{DEFAULT_ADMIN}`" in (DOCS / "operations.md").read_text()


def make_run_argv(**variables: str) -> list[str]:
    """The command `make run` would run with these variables (make -n prints, runs nothing)."""
    assigned = [f"{name}={value}" for name, value in variables.items()]
    printed = subprocess.run(
        ["make", "--no-print-directory", "-n", "run", *assigned],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    line = next(line for line in printed.splitlines() if "run_demo.py" in line)
    argv = shlex.split(line)
    return argv[argv.index("examples/run_demo.py") :]


def get(url: str) -> tuple[int, str | None]:
    """The status and X-Error-Code of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.headers.get("X-Error-Code")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("X-Error-Code")


def test_make_run_starts_the_admin_listener_where_asked() -> None:
    demo, listen, admin = (f"127.0.0.1:{free_port()}" for _ in range(3))
    argv = make_run_argv(DEMO_LISTEN=demo, LISTEN=listen, ADMIN=admin)
    assert argv[-2:] == ["--admin", admin]
    with subprocess.Popen(
        [sys.executable, *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdout is not None
        try:
            printed = ""
            while "Ctrl-C" not in printed:
                line = process.stdout.readline()
                assert line, f"run_demo ended early: {printed}"
                printed += line
            assert get(f"http://{admin}/healthz") == (200, None)
            assert get(f"http://{admin}/ui") == (200, None)  # the console the lines point at
            assert get(f"http://{listen}/v1/items/42") == (404, "NOT_FOUND")
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=20) == 0
        printed += process.stdout.read()
    assert f"mendpoint gaps --admin {admin}" in printed
    assert f"The console: http://{admin}/ui\n" in printed
    command = next(
        w for line in printed.splitlines() for w in line.split() if w.endswith("mendpoint")
    )
    assert (REPO / command).is_file(), f"the printed {command} does not exist"


def test_ctrl_c_in_a_terminal_stops_everything_with_status_0() -> None:
    """A terminal's Ctrl-C signals the whole foreground group: make, the launcher and (before)
    the children, which raced the launcher to an exit status `make` reported as Error 1."""
    demo, listen = (f"127.0.0.1:{free_port()}" for _ in range(2))
    argv = make_run_argv(DEMO_LISTEN=demo, LISTEN=listen, ADMIN="off")
    with subprocess.Popen(
        [sys.executable, *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    ) as process:
        assert process.stdout is not None
        printed = ""
        while "Ctrl-C" not in printed:
            line = process.stdout.readline()
            assert line, f"run_demo ended early: {printed}"
            printed += line
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=20) == 0
    for address in (demo, listen):
        host, _, port = address.rpartition(":")
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=1).close()


def children_of(pid: int) -> set[int]:
    """The live processes whose parent is `pid`, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_both_servers_as_ctrl_c_does(signum: signal.Signals) -> None:
    """`kill` of the launcher, or its terminal closing, stopped it alone: the demo and the
    gateway, in sessions of their own, kept their ports (the next `make run` found them taken)."""
    demo, listen = (f"127.0.0.1:{free_port()}" for _ in range(2))
    argv = make_run_argv(DEMO_LISTEN=demo, LISTEN=listen, ADMIN="off")
    with subprocess.Popen(
        [sys.executable, *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdout is not None
        children: set[int] = set()
        try:
            printed = ""
            while "Ctrl-C" not in printed:
                line = process.stdout.readline()
                assert line, f"run_demo ended early: {printed}"
                printed += line
            children = children_of(process.pid)
            assert len(children) == 2  # the demo and the gateway
            process.send_signal(signum)
            assert process.wait(timeout=patience(20)) == 0
        finally:
            for pid in children:  # what a launcher that did not stop them left behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            if process.poll() is None:
                process.kill()
    assert not [pid for pid in children if alive(pid)]
    assert not [address for address in (demo, listen) if listening(address)]


def test_a_taken_port_is_one_line_naming_it() -> None:
    demo, admin = (f"127.0.0.1:{free_port()}" for _ in range(2))
    with socket.socket() as holder:  # what a gateway left running holds
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        listen = f"127.0.0.1:{holder.getsockname()[1]}"
        argv = make_run_argv(DEMO_LISTEN=demo, LISTEN=listen, ADMIN=admin)
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=patience(30),
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"make run: {listen} (LISTEN) is in use: stop what holds it, "
        "or choose another with LISTEN=HOST:PORT"
    ]
    assert done.stdout == ""
    assert not listening(demo) and not listening(admin)  # nothing was started
