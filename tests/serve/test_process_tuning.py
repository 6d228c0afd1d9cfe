"""The cyclic collector while a gateway starts: off until the listeners are up, then on with
start-up frozen (gateway.serve.process_tuning), and never left off by a command that returns
early."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest

from gateway.cli import main
from gateway.serve import process_tuning
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.waits import patience


def test_the_collector_rests_while_starting_and_is_on_after() -> None:
    assert gc.isenabled()
    with process_tuning.starting():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_gc_default_leaves_the_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MENDPOINT_GC", "default")
    with process_tuning.starting():
        assert gc.isenabled()


def test_a_serve_usage_error_leaves_the_collector_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("MENDPOINT_CONFIG", "MENDPOINT_UPSTREAM"):
        monkeypatch.delenv(name, raising=False)
    assert main(["serve"]) == 2
    assert "give --config FILE or --upstream URL" in capsys.readouterr().err
    assert gc.isenabled()


def test_a_serving_gateway_has_the_collector_on_and_its_start_up_frozen() -> None:
    """`mendpoint serve` in a process of its own; a thread reads the collector once /readyz
    answers, as it is for every request after."""
    admin = free_port()
    script = textwrap.dedent(
        f"""
        import gc, os, threading, time, urllib.request
        def watch():
            while True:
                try:
                    urllib.request.urlopen("http://127.0.0.1:{admin}/readyz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.05)
            print(gc.isenabled(), gc.get_freeze_count() > 10_000, gc.get_threshold()[0])
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
        from gateway.cli import main
        main(["serve", "--upstream", "http://127.0.0.1:9",
              "--listen", "127.0.0.1:{free_port()}", "--admin", "127.0.0.1:{admin}"])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=patience(30),
        check=False,
    )
    assert done.stdout.split() == ["True", "True", str(process_tuning.GEN0_THRESHOLD)], done.stderr
