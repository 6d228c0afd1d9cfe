"""`make run`: the bundled demo API with Mendpoint in front of it, on the embedded defaults.

Checks that every address it was given is free (one line naming a taken one, exit 1: a
server left running, not a traceback), starts both as child processes, waits until each
answers (the gateway's admin listener too, unless `--admin off`), prints curl lines to try
and the console's URL, and stops both on Ctrl-C, SIGTERM or SIGHUP (a closed terminal), or
when either exits. No signal leaves a child running: each is told to stop, waited for, and
killed with its whole process group if it will not.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gateway.config.admin_address import DEFAULT_ADMIN

ROOT = Path(__file__).resolve().parent.parent
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_WAIT_S = 10


class Stop:
    """Set by the signal handler; the launcher's loops look at it between short waits, so a
    signal never interrupts the start of a child halfway (an exception raised inside `Popen`
    could lose a started child)."""

    signal: int | None = None

    @classmethod
    def handle(cls, signum: int, frame: object) -> None:
        cls.signal = signum


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--demo-listen", default="127.0.0.1:9000", help="the demo API's HOST:PORT")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="Mendpoint's HOST:PORT")
    parser.add_argument("--admin", default=DEFAULT_ADMIN, help="HOST:PORT, or 'off'")
    args = parser.parse_args()
    admin = None if args.admin == "off" else args.admin
    wanted = {"DEMO_LISTEN": args.demo_listen, "LISTEN": args.listen}
    if admin is not None:
        wanted["ADMIN"] = admin
    for variable, address in wanted.items():
        problem = taken(address)
        if problem is not None:
            print(
                f"make run: {address} ({variable}) {problem}: stop what holds it, "
                f"or choose another with {variable}=HOST:PORT",
                file=sys.stderr,
            )
            return 1
    for signum in STOPPING:
        signal.signal(signum, Stop.handle)
    demo = [sys.executable, str(ROOT / "examples" / "demo_api.py"), "--listen", args.demo_listen]
    upstream = f"http://{args.demo_listen}"
    serve = ["serve", "--upstream", upstream, "--listen", args.listen, "--admin", args.admin]
    children: list[subprocess.Popen[bytes]] = []
    try:
        for argv in (demo, [sys.executable, "-m", "gateway", *serve]):
            # Each in its own session: Ctrl-C reaches this launcher alone, which stops them in
            # order and exits 0, instead of racing them to a half-printed exit status.
            children.append(subprocess.Popen(argv, start_new_session=True))
        for address in wanted.values():
            if not wait_for_port(address, children):
                if Stop.signal is not None:
                    return 0
                print(f"nothing answered on {address}; see the messages above", file=sys.stderr)
                return 1
        print_try_lines(args.listen, admin)
        while Stop.signal is None:
            if any(child.poll() is not None for child in children):
                return 1
            time.sleep(0.1)
        return 0
    finally:
        stop(children)


def taken(address: str) -> str | None:
    """Why `address` cannot be listened on (in use, not this machine's), or None when free.
    Bound as the servers bind (SO_REUSEADDR), so a port a stopped server left in TIME_WAIT
    is free."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        family = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, int(port)))
    except OSError as exc:
        return "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be listened on: {exc}"
    except ValueError:
        return "is not HOST:PORT"
    return None


def stop(children: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each child's process group, then wait; SIGKILL to a group still running.
    Signals that stop the launcher are ignored meanwhile: a second Ctrl-C cannot cut the
    stop short and leave a child behind."""
    for signum in STOPPING:
        signal.signal(signum, signal.SIG_IGN)
    for child in children:
        if child.poll() is None:
            _signal_group(child, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(child, signal.SIGKILL)
            child.wait()


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signum)  # its own session: the group is the child's pid


def wait_for_port(address: str, children: Sequence[subprocess.Popen[bytes]]) -> bool:
    """True once `address` accepts a connection; False if a child exits, a stopping signal
    comes or 30 s pass first."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if Stop.signal is not None or any(child.poll() is not None for child in children):
            return False
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def mendpoint_command() -> str:
    """How to call `mendpoint` from the repository: the venv's script (not on PATH unless the
    venv is active; `make shell` opens a shell where it is)."""
    script = Path(sys.executable).parent / "mendpoint"
    try:
        return str(script.relative_to(ROOT))
    except ValueError:
        return str(script)


def print_try_lines(listen: str, admin: str | None) -> None:
    base = f"http://{listen}"
    lines = [
        f"curl -i {base}/v1/items/42",
        f"curl -i {base}/v1/search",
        f"curl -i -X POST -H 'X-Error-Format: envelope' -d '{{}}' {base}/v1/orders",
    ]
    if admin is not None:
        lines += [f"curl -s http://{admin}/metrics", f"{mendpoint_command()} gaps --admin {admin}"]
    console = "" if admin is None else f"The console: http://{admin}/ui\n\n"
    print(
        "\nMendpoint is running in front of the demo API (Ctrl-C stops both). Try:\n\n  "
        + "\n  ".join(lines)
        + "\n\n"
        + console,
        end="",
        flush=True,
    )


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
