"""`pip install ./clients/python` in a clean venv: no dependency of its own, and `decide`
works there on a payload the gateway writes (docs/agents.md, Install)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents_live import REPO

PAYLOAD = {
    "isError": True,
    "content": [{"type": "text", "text": "Error executing tool search: 429"}],
    "_meta": {
        "mendpoint/failure": {
            "error": {
                "code": "RATE_LIMITED",
                "retryable": True,
                "retry_after_ms": 200,
                "fix_required": None,
                "fix_command": None,
                "message": "slow down",
            },
            "failure": {"category": "RATE_LIMITED", "code": "RATE_LIMITED", "retryable": True},
        }
    },
}


@pytest.mark.slow
def test_the_package_installs_alone_in_a_clean_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(REPO / "clients" / "python")],
        check=True,
        timeout=300,
    )
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        check=True,
        capture_output=True,
        text=True,
    )
    names = {p["name"] for p in json.loads(installed.stdout)}
    assert names - {"pip", "setuptools"} == {"mendpoint-agents"}
    script = (
        "import json, sys; from mendpoint_agents import decide; "
        "d = decide(json.loads(sys.argv[1])); print(d.action.value, d.retry_after_ms)"
    )
    ran = subprocess.run(
        [str(python), "-c", script, json.dumps(PAYLOAD)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: the installed copy is what is imported
    )
    assert ran.stdout.split() == ["retry", "200"]
