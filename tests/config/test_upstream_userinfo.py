"""An upstream URL with `user:password@` is refused at load, with the fix, and never echoed
(docs/security.md): it was never sent upstream, but it sat in the start-up log and on the
console's Routes page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO

SECRET = "s3cretpw"
URL = f"http://alice:{SECRET}@127.0.0.1:9"


def mendpoint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("key", ["upstream", "public_url"])
def test_a_config_naming_credentials_in_a_url_is_refused_with_its_line(
    key: str, tmp_path: Path
) -> None:
    route = {"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9", key: URL}
    if key == "public_url":
        route["type"] = "mcp"
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"routes": [route]}))
    for command in (("check", "--config", str(config)), ("serve", "--config", str(config))):
        done = mendpoint(*command)
        assert done.returncode != 0
        said = done.stdout + done.stderr
        assert f"routes[0].{key}" in said and "user information" in said
        assert SECRET not in said


def test_the_embedded_default_refuses_it_too() -> None:
    done = mendpoint("serve", "--upstream", URL, "--listen", "127.0.0.1:0", "--admin", "off")
    assert done.returncode != 0
    assert "user information" in done.stderr and SECRET not in done.stderr
