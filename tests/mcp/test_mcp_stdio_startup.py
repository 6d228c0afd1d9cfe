"""`mendpoint stdio` starts its server before reading its config (docs/performance.md#mcp-start-up).

The config is a named pipe the test writes only once the server has started: the server
runs while the gateway still waits for its config, and the session then goes on as usual. A
config that does not load still fails the command, and the server started for it is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.mcp import INIT, call

MENDPOINT = [sys.executable, "-m", "gateway", "--log-level", "warning", "stdio"]
SERVER = (
    "import json, os, sys\n"
    "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "for line in sys.stdin:\n"
    "    req = json.loads(line)\n"
    "    if 'id' not in req:\n"
    "        continue\n"
    "    if req['method'] == 'initialize':\n"
    "        result = {'protocolVersion': '2025-11-25', 'capabilities': {},"
    " 'serverInfo': {'name': 'p', 'version': '1'}}\n"
    "    else:\n"
    "        result = {'content': [{'type': 'text', 'text': 'ENOENT: no such file or directory,"
    " open \\'/x\\''}], 'isError': True}\n"
    "    print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': result}), flush=True)\n"
)


def wait_for(path: Path, within_s: float = 60) -> str:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def test_the_server_starts_before_the_config_is_read(tmp_path: Path) -> None:
    config, pid_file = tmp_path / "gateway.yaml", tmp_path / "pid"
    os.mkfifo(config)
    with subprocess.Popen(
        [*MENDPOINT, "--config", str(config), "--", sys.executable, "-c", SERVER, str(pid_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as relay:
        assert relay.stdin is not None and relay.stdout is not None
        try:
            pid = int(wait_for(pid_file))  # started, though the gateway has no config yet
            assert alive(pid) and relay.poll() is None
            with open(config, "w") as fifo:
                fifo.write("routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\n")
            lines = b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, call(1, "read", {})))
            relay.stdin.write(lines)
            relay.stdin.flush()
            init = json.loads(relay.stdout.readline())
            assert init["id"] == 0 and init["result"]["serverInfo"]["name"] == "p"
            failed = json.loads(relay.stdout.readline())
            # The config's rules were loaded and upgrade the tool error, as before.
            assert "mendpoint/failure" in failed["result"]["_meta"]
            relay.stdin.close()
            assert relay.wait(60) == 0
        finally:
            relay.kill()


def running_with(marker: str) -> list[int]:
    """The live processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in words and entry.name.isdigit() and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_a_config_that_does_not_load_fails_and_ends_the_server(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\nlisten: x\n")
    marker = f"mendpoint-test-server-{os.getpid()}-{time.monotonic_ns()}"
    server = [sys.executable, "-c", "import time; time.sleep(60)", marker]
    done = subprocess.run(
        [*MENDPOINT, "--config", str(config), "--", *server],
        input=b"",
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert f"{config}:3: listen" in done.stderr.decode()
    assert done.stdout == b""
    for _ in range(200):
        if not running_with(marker):
            break
        time.sleep(0.05)
    assert running_with(marker) == [], "the server outlived the failed command"
