"""The nginx upstream: fixed bodies from one worker, on loopback, for the run's lifetime; and
the trace collector the tracing row exports to."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from bench import harness
from bench.fixtures import OK_PATH, write_nginx

ROOT = Path(__file__).resolve().parent.parent


class Nginx:
    """nginx in the foreground (`daemon off`), pinned to the load core unless moved."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Nginx:
        self.root.chmod(0o755)  # the worker runs as an unprivileged user and reads big.bin
        conf = write_nginx(self.root, self.port)
        (self.root / "big.bin").chmod(0o644)
        argv = [
            shutil.which("nginx") or "/usr/sbin/nginx",
            "-c",
            str(conf),
            "-p",
            str(self.root),
            "-e",
            str(self.root / "err.log"),
        ]
        with (self.root / "nginx.out").open("ab") as out:
            self.proc = subprocess.Popen(
                harness.pinned(harness.LOAD_CORE, argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        harness.wait_ready(self.url + OK_PATH, self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            harness.stop(self.proc)

    def pin(self, core: int) -> None:
        """Move the master and its workers (for the direct runs nginx is the system)."""
        assert self.proc is not None
        harness.repin([self.proc.pid, *_children(self.proc.pid)], core)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


class OtlpSink:
    """The trace collector of the tracing row (bench/otlp_sink.py), on the load core."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> OtlpSink:
        argv = [sys.executable, "-m", "bench.otlp_sink", str(self.port)]
        with (self.root / "otlp-sink.out").open("ab") as out:
            self.proc = subprocess.Popen(
                harness.pinned(harness.LOAD_CORE, argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=ROOT,
            )
        harness.wait_ready(self.url + "/seen", self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            harness.stop(self.proc)

    def exports(self) -> int:
        """How many batches the gateway has sent so far (the row is checked with it)."""
        with urllib.request.urlopen(self.url + "/seen", timeout=5) as answer:
            seen: dict[str, int] = json.loads(answer.read())
        return seen["exports"]
