"""Token and key files are read only when no other user can (docs/security.md#secret-files).

Through real processes: `mendpoint serve` with an admin token file every user can read exits
with the fix; with the owner's alone it serves; with its group's, for a group it is not in, it
serves and says so; `mendpoint resolver --token-file` refuses a world-readable token too.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml

from tests.support.gateway import start_process, stop_process, supervised, write_config
from tests.support.ports import free_port
from tests.support.secrets import write_secret

TOKEN = "9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c"


def config(tmp_path: Path, token: Path) -> Path:
    admin = f"127.0.0.1:{free_port()}"
    return write_config(
        tmp_path,
        {
            "listen": f"127.0.0.1:{free_port()}",
            "admin": admin,
            "admin_token_file": str(token),
            "routes": [{"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}],
        },
    )


async def test_a_token_every_user_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    token = write_secret(tmp_path / "admin-token", TOKEN + "\n")
    token.chmod(0o644)
    process = await start_process("serve", "--config", str(config(tmp_path, token)))
    await asyncio.wait_for(process.wait(), 60)  # it stops by itself
    code, said = await stop_process(process)
    assert code != 0
    assert f"{token} is readable by every user (mode 0644): chmod 600 {token}" in said
    assert TOKEN not in said


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another group needs root")
async def test_a_token_another_group_can_read_is_said_and_served(tmp_path: Path) -> None:
    token = write_secret(tmp_path / "admin-token", TOKEN + "\n")
    foreign = max({os.getegid(), *os.getgroups()}) + 4242
    os.chown(token, -1, foreign)
    token.chmod(0o640)
    path = config(tmp_path, token)
    admin = yaml.safe_load(path.read_text())["admin"]
    async with supervised(path, admin, tmp_path, workers=None):
        pass
    log = (tmp_path / "gateway.log").read_text()
    assert f"readable by group {foreign}, which this process is not in" in log


async def test_the_owners_token_serves(tmp_path: Path) -> None:
    token = write_secret(tmp_path / "admin-token", TOKEN + "\n")
    path = config(tmp_path, token)
    admin = yaml.safe_load(path.read_text())["admin"]
    async with supervised(path, admin, tmp_path, workers=None):
        pass
    assert "readable by" not in (tmp_path / "gateway.log").read_text()


async def test_the_resolver_refuses_a_world_readable_token(tmp_path: Path) -> None:
    catalog = write_config(tmp_path, {"skills": []}, "catalog.yaml")
    token = write_secret(tmp_path / "resolver-token", TOKEN + "\n")
    token.chmod(0o604)
    listen = f"127.0.0.1:{free_port()}"
    process = await start_process(
        "resolver", "--config", str(catalog), "--listen", listen, "--token-file", str(token)
    )
    await asyncio.wait_for(process.wait(), 60)
    code, said = await stop_process(process)
    assert code != 0 and "readable by every user (mode 0604)" in said
