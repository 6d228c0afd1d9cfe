"""`make run`: the bundled demo API with Mendpoint in front of it, on the embedded defaults.

Starts both as child processes, waits until each answers (the gateway's admin listener too,
unless `--admin off`), prints curl lines to try, and stops both on Ctrl-C (or when either
exits).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from gateway.config.admin_address import DEFAULT_ADMIN

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--demo-listen", default="127.0.0.1:9000")
    parser.add_argument("--listen", default="127.0.0.1:8080")
    parser.add_argument("--admin", default=DEFAULT_ADMIN, help="HOST:PORT, or 'off'")
    args = parser.parse_args()
    # The children get their own sessions: Ctrl-C reaches this launcher alone, which stops
    # them in order and exits 0, instead of racing them to a half-printed exit status.
    demo = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "demo_api.py"), "--listen", args.demo_listen],
        start_new_session=True,
    )
    gateway = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--upstream",
            f"http://{args.demo_listen}",
            "--listen",
            args.listen,
            "--admin",
            args.admin,
        ],
        start_new_session=True,
    )
    children = (demo, gateway)
    try:
        admin = None if args.admin == "off" else args.admin
        for address in (args.demo_listen, args.listen, *([admin] if admin else [])):
            if not wait_for_port(address, children):
                print(f"nothing answered on {address}; see the messages above", file=sys.stderr)
                return 1
        print_try_lines(args.listen, admin)
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C cannot cut the stop short
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def wait_for_port(address: str, children: tuple[subprocess.Popen[bytes], ...]) -> bool:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
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
    print(
        "\nMendpoint is running in front of the demo API (Ctrl-C stops both). Try:\n\n  "
        + "\n  ".join(lines)
        + "\n",
        flush=True,
    )


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
