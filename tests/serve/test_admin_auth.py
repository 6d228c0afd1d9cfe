"""The admin listener's token (docs/security.md#admin-authentication).

With `admin_token_file`, every admin path but /healthz and /readyz needs a bearer token of
that file, checked in constant time, with the file read again when it is rotated; the
`mendpoint gaps`, `followups` and `suggest --from` clients send it. Without one, an admin
listener on a non-loopback address is warned about once, at start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.cli import main
from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.config.secrets import ADMIN_TOKEN_ENV
from gateway.resolve.auth import TokenFile
from gateway.serve import workers
from gateway.serve.admin import warn_if_exposed
from gateway.telemetry.metrics import REGISTRY
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream, supervised
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.secrets import write_secret
from tests.support.waits import patience

TOKEN = "a1f0c3b2d4e6f8091a2b3c4d5e6f7081"
SECOND = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
ROTATED = "77777777777777770000000000000000"
SECRET = "hunter2pass-Zq81"
GUARDED = ("/metrics", "/gaps", "/followups", "/no-such-path")
OPEN = ("/healthz", "/readyz")


def leaky_upstream() -> web.Application:
    """An error only the shipped defaults match, whose message carries a password."""

    async def handler(request: web.Request) -> web.Response:
        return web.json_response(
            {"message": f"login failed: password={SECRET} refused"}, status=422
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


def token_file(tmp_path: Path, *tokens: str, name: str = "admin-token") -> Path:
    return write_secret(tmp_path / name, "".join(f"{t}\n" for t in tokens))


async def status_of(url: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as answer:
        if answer.status == 401:
            assert answer.headers["WWW-Authenticate"] == 'Bearer realm="mendpoint-admin"'
        await answer.read()
        return answer.status


def refused(reason: str) -> float:
    sample = REGISTRY.get_sample_value("mendpoint_admin_auth_failures_total", {"reason": reason})
    return sample or 0.0


@pytest.fixture
async def guarded(
    start_upstream: StartUpstream, start_gateway: StartGateway, tmp_path: Path
) -> tuple[RunningGateway, str, Path]:
    upstream = await start_upstream(leaky_upstream())
    tokens = token_file(tmp_path, TOKEN, SECOND)
    config = {
        "routes": [{"name": "api", "upstream": upstream}],
        "admin_token_file": str(tokens),
    }
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    return gateway, f"http://{host}:{port}", tokens


async def test_every_path_but_the_probes_needs_a_token_of_the_file(
    guarded: tuple[RunningGateway, str, Path],
) -> None:
    _, admin, _ = guarded
    missing, wrong = refused("missing"), refused("wrong")
    for path in OPEN:
        assert await status_of(admin + path) == 200, path
    for path in GUARDED:
        assert await status_of(admin + path) == 401, path
        assert await status_of(admin + path, "not-the-token-0000000") == 401, path
    assert refused("missing") - missing == len(GUARDED)
    assert refused("wrong") - wrong == len(GUARDED)
    for token in (TOKEN, SECOND):  # every line of the file is accepted
        assert await status_of(admin + "/metrics", token) == 200
        assert await status_of(admin + "/followups", token) == 200
        assert await status_of(admin + "/no-such-path", token) == 404


async def test_gaps_stay_redacted_behind_the_token(
    guarded: tuple[RunningGateway, str, Path],
) -> None:
    gateway, admin, _ = guarded
    async with gateway.session.get(gateway.url + "/login") as answer:
        assert answer.status == 422
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(admin + "/gaps", headers=headers) as answer,
    ):
        text = await answer.text()
    (row,) = json.loads(text)["signatures"]
    assert "login failed" in row["signature"]
    assert SECRET not in text


async def test_a_rotated_file_is_read_again_and_a_broken_one_keeps_the_last_tokens(
    guarded: tuple[RunningGateway, str, Path],
) -> None:
    _, admin, tokens = guarded
    tokens.write_text(f"{ROTATED}\n")
    deadline = time.monotonic() + patience(10)
    while await status_of(admin + "/metrics", ROTATED) != 200:  # re-read within a second
        assert time.monotonic() < deadline, "the rotated token was never accepted"
        await asyncio.sleep(0.1)
    assert await status_of(admin + "/metrics", TOKEN) == 401
    tokens.write_text("short\n")  # not a token: the last tokens stay
    await asyncio.sleep(1.2)
    assert await status_of(admin + "/metrics", ROTATED) == 200


async def test_the_clients_send_the_token(
    guarded: tuple[RunningGateway, str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    gateway, admin, tokens = guarded
    async with gateway.session.get(gateway.url + "/login") as answer:
        await answer.read()
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    assert await asyncio.to_thread(main, ["gaps", "--admin", admin]) == 1
    assert "--token-file" in capsys.readouterr().err
    assert (
        await asyncio.to_thread(main, ["gaps", "--admin", admin, "--token-file", str(tokens)]) == 0
    )
    assert "login failed" in capsys.readouterr().out
    monkeypatch.setenv(ADMIN_TOKEN_ENV, str(tokens))
    assert await asyncio.to_thread(main, ["followups", "--admin", admin]) == 0
    out = tmp_path / "drafts.yaml"
    running = str(tmp_path / "gateway.yaml")  # the file start_gateway wrote and loaded
    argv = ["suggest", "--from", admin, "--config", running, "--out", str(out)]
    assert await asyncio.to_thread(main, argv) == 0
    assert out.exists() and SECRET not in out.read_text()
    wrong = token_file(tmp_path, "0000000000000000ffffffffffffffff", name="wrong-token")
    monkeypatch.setenv(ADMIN_TOKEN_ENV, str(wrong))
    assert await asyncio.to_thread(main, ["gaps", "--admin", admin]) == 1
    assert "not one its admin_token_file holds" in capsys.readouterr().err


HOSTS = {
    "every-ipv4-address": ("0.0.0.0", True),
    "every-address": ("::", True),
    "a-routable-address": ("10.1.2.3", True),
    "a-name": ("admin.internal", True),
    "ipv4-loopback": ("127.0.0.1", False),
    "ipv6-loopback": ("::1", False),
    "localhost": ("localhost", False),
}


@pytest.mark.parametrize(("host", "warned"), list(HOSTS.values()), ids=list(HOSTS))
def test_an_exposed_admin_without_a_token_is_warned_about(
    host: str, warned: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="mendpoint"):
        warn_if_exposed(host, None)
        warn_if_exposed(host, TokenFile(str(token_file(tmp_path, TOKEN))))
    assert len(caplog.records) == (1 if warned else 0)
    if warned:
        assert "without admin_token_file" in caplog.records[0].getMessage()


async def test_serve_with_admin_on_every_address_warns_once_at_start(
    start_upstream: StartUpstream,
) -> None:
    """`--admin 0.0.0.0:PORT` said nothing before. No traffic goes to it but over loopback."""
    upstream = await start_upstream(leaky_upstream())
    port, admin = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "gateway", "serve", "--upstream", upstream),
        *("--listen", f"127.0.0.1:{port}", "--admin", f"0.0.0.0:{admin}"),
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != ADMIN_TOKEN_ENV},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + patience(30)
        while True:
            try:
                if await status_of(f"http://127.0.0.1:{admin}/readyz") == 200:
                    break
            except aiohttp.ClientConnectionError:
                assert time.monotonic() < deadline and process.returncode is None
                await asyncio.sleep(0.05)
        assert await status_of(f"http://127.0.0.1:{admin}/metrics") == 200  # open: warned
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 30)
    assert process.stderr is not None
    stderr = (await process.stderr.read()).decode()
    assert stderr.count("without admin_token_file") == 1, stderr


def write_config(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot read"), ("short\n", "at least 16"), ("\n\n", "holds no token")],
    ids=["missing", "too-short", "empty"],
)
def test_a_bad_token_file_is_a_config_error_with_its_line(
    content: str | None, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    if content is not None:
        write_secret(tmp_path / "admin-token", content)
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "routes: [{name: api, upstream: 'http://127.0.0.1:9'}]\nadmin_token_file: admin-token\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_config(str(path))
    message = str(raised.value)
    assert f"{path}:2: admin_token_file:" in message and problem in message
    write_secret(tmp_path / "admin-token", f"{TOKEN}\n")  # relative to the config file
    assert load_config(str(path)).admin_token_file == str(tmp_path / "admin-token")


@pytest.mark.skipif(not workers.supported(), reason="--workers needs Linux")
async def test_the_supervisors_admin_listener_checks_the_token_too(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(leaky_upstream())
    port, admin = free_port(), free_port()
    tokens = token_file(tmp_path, TOKEN)
    config = write_config(
        tmp_path,
        {
            "listen": f"127.0.0.1:{port}",
            "admin": f"127.0.0.1:{admin}",
            "admin_token_file": str(tokens),
            "routes": [{"name": "api", "upstream": upstream}],
        },
    )
    base = f"http://127.0.0.1:{admin}"
    async with supervised(config, f"127.0.0.1:{admin}", tmp_path):
        assert await status_of(base + "/metrics") == 401
        assert await status_of(base + "/gaps", "not-the-token-0000000") == 401
        assert await status_of(base + "/metrics", TOKEN) == 200
        assert await status_of(base + "/healthz") == 200
