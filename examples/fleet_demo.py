"""`make fleet-demo`: two Mendpoint replicas behind HAProxy round-robin, sharing a Redis, in
front of the demo API (docs/operations.md#fleet).

Starts redis-server, the demo API, two `mendpoint serve` processes with the same `fleet:`
config and HAProxy balancing every request over them, as a Kubernetes Service would; prints
what to try, and stops everything on Ctrl-C. `--check` instead sends a retried failure through
the front, shows that each replica's /followups holds the same fleet-wide figures, and exits
(0 when they agree). Needs redis-server and haproxy (tests/setup/system-packages.sh installs
both) and the `fleet` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# HAProxy round-robin in front of the replicas (tests/support/fleet.py runs the same config).
HAPROXY = """\
global
    log stderr format raw local0 err
defaults
    mode http
    # Every request is balanced anew, a kept-alive client's too: a plain round-robin Service.
    option http-server-close
    timeout connect 2s
    timeout client 30s
    timeout server 30s
frontend fleet
    bind {front}
    default_backend replicas
backend replicas
    balance roundrobin
{servers}
"""


def program(name: str) -> str:
    for found in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/local/sbin/{name}"):
        if found and os.access(found, os.X_OK):
            return found
    sys.exit(f"fleet-demo: {name} is not installed (tests/setup/system-packages.sh installs it)")


def gateway_config(upstream: str, redis_port: int, key_file: Path) -> str:
    fleet = {
        "redis": f"redis://127.0.0.1:{redis_port}/0",
        "key_prefix": "fleet-demo",
        "key_file": str(key_file),  # seals what the replicas share (docs/security.md)
    }
    return json.dumps(
        {
            "routes": [{"name": "demo", "prefix": "/", "upstream": upstream, "mode": "additive"}],
            "followups": {"window_s": 5},
            "fleet": fleet,
            "shutdown": {"drain_delay_s": 0, "grace_s": 5},
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--front", default="127.0.0.1:8080", help="HAProxy's HOST:PORT")
    parser.add_argument("--replicas", default="127.0.0.1:8081,127.0.0.1:8082")
    parser.add_argument("--admins", default="127.0.0.1:8491,127.0.0.1:8492")
    parser.add_argument("--demo-listen", default="127.0.0.1:9000")
    parser.add_argument("--redis-port", type=int, default=6390)
    parser.add_argument("--check", action="store_true", help="run one scenario and exit")
    args = parser.parse_args()
    replicas, admins = args.replicas.split(","), args.admins.split(",")
    work = Path(tempfile.mkdtemp(prefix="mendpoint-fleet-demo-"))
    key_file = work / "fleet.key"
    key_file.touch(mode=0o600)
    key_file.write_text(secrets.token_hex(32) + "\n")
    config = work / "gateway.json"
    config.write_text(gateway_config(f"http://{args.demo_listen}", args.redis_port, key_file))
    servers = "\n".join(f"    server r{i} {address}" for i, address in enumerate(replicas))
    (work / "haproxy.cfg").write_text(HAPROXY.format(front=args.front, servers=servers))
    children: list[subprocess.Popen[bytes]] = []
    try:
        redis = [program("redis-server"), "--port", str(args.redis_port), "--bind", "127.0.0.1"]
        children.append(start([*redis, "--save", "", "--appendonly", "no", "--dir", str(work)]))
        children.append(
            start([sys.executable, "examples/demo_api.py", "--listen", args.demo_listen])
        )
        serve = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
        for listen, admin in zip(replicas, admins, strict=True):
            children.append(start([*serve, "--listen", listen, "--admin", admin]))
        children.append(start([program("haproxy"), "-db", "-f", str(work / "haproxy.cfg")]))
        for address in (f"127.0.0.1:{args.redis_port}", args.demo_listen, *replicas, *admins):
            if not wait_for_port(address, children):
                print(f"fleet-demo: nothing answered on {address}", file=sys.stderr)
                return 1
        wait_store_up(admins)
        if args.check:
            return check(args.front, admins)
        print_try_lines(args.front, admins)
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for child in reversed(children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        shutil.rmtree(work, ignore_errors=True)


def start(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL)


def wait_for_port(address: str, children: list[subprocess.Popen[bytes]]) -> bool:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + 180  # gateways start in seconds; a loaded machine is slower
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            return False
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        body: dict[str, object] = json.loads(answer.read())
        return body


def wait_store_up(admins: list[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(get_json(f"http://{a}/followups").get("scope") == "fleet" for a in admins):
            return
        time.sleep(0.2)


def check(front: str, admins: list[str]) -> int:
    """One caller's bad order, retried unchanged through the front (so on the other replica),
    then fixed: each replica's /followups shows the same fleet-wide outcomes."""
    for quantity in ("two", "two", 2):
        request = urllib.request.Request(
            f"http://{front}/v1/orders",
            data=json.dumps({"quantity": quantity}).encode(),
            headers={"Content-Type": "application/json", "User-Agent": "fleet-demo-check"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                print(f"POST /v1/orders quantity={quantity!r}: {answer.status}")
        except urllib.error.HTTPError as failure:
            print(f"POST /v1/orders quantity={quantity!r}: {failure.code}")
        time.sleep(0.3)
    time.sleep(1.0)
    tables = [get_json(f"http://{admin}/followups") for admin in admins]
    for admin, table in zip(admins, tables, strict=True):
        print(f"{admin}: {json.dumps(table['codes'])}")
    same = tables[0]["codes"] == tables[1]["codes"]
    fleet = all(t.get("scope") == "fleet" for t in tables)
    print("the replicas agree, fleet-wide" if same and fleet else "the replicas DISAGREE")
    return 0 if same and fleet and tables[0]["codes"] else 1


def print_try_lines(front: str, admins: list[str]) -> None:
    base = f"http://{front}"
    lines = [
        f"curl -i -X POST -d '{{\"quantity\": \"two\"}}' -H 'Content-Type: application/json' "
        f"{base}/v1/orders   # twice: the retry lands on the other replica",
        *(f"mendpoint followups --admin {admin}" for admin in admins),
        *(f"mendpoint gaps --admin {admin}" for admin in admins),
    ]
    print(
        "\nTwo Mendpoint replicas behind HAProxy round-robin, sharing Redis, in front of the "
        "demo API (Ctrl-C stops everything). Try:\n\n  " + "\n  ".join(lines) + "\n",
        flush=True,
    )


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
