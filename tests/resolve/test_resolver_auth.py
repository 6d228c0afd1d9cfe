"""`mendpoint resolver` authenticates the gateway with a bearer token (docs/security.md).

The resolver runs as a real subprocess: 401 without a token or with a wrong one (counted in
its /metrics), 200 with it; the gateway's resolution works end to end with the token file,
and a gateway holding the wrong token gets no options. Without a token the resolver refuses a
non-loopback address unless told `--insecure-no-auth`, which it warns about.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from gateway.cli import main
from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.config.secrets import TOKEN_ENV
from tests.support.gateway import RunningGateway, StartGateway, StartUpstream
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.recovery import CSV_RULE, csv_failing_upstream
from tests.support.secrets import write_secret

TOKEN = "4f6c1a0e9b2d7c3e8a5f1b0c6d2e9a7f"
OTHER = "0000000000000000aaaaaaaaaaaaaaaa"
CATALOG = """skills:
  - name: schema.infer_csv_schema
    version: 1.0.0
    recovers: [format_inspection]
    repair: inspect
    purpose: Inspect the CSV before retrying.
"""
REQUEST = {
    "failure": {
        "category": "VALIDATION_ERROR",
        "code": "CSV_MALFORMED",
        "intent": "format_inspection",
    },
    "caller": {"scopes": []},
    "context": {"operation": "POST /v1/csv"},
}


def write(path: Path, text: str) -> str:
    return str(write_secret(path, text))


@contextlib.asynccontextmanager
async def resolver(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, listen: str = "127.0.0.1"
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """A `mendpoint resolver` subprocess, ready; yields its base URL (always via 127.0.0.1)."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "resolver",
        "--config",
        write(tmp_path / "catalog.yaml", CATALOG),
        "--listen",
        f"{listen}:{port}",
        *args,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stderr=asyncio.subprocess.PIPE,
    )
    scheme = "https" if "--tls-cert" in args else "http"
    try:
        for _ in range(200):  # ready once it accepts connections (or it has exited)
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if process.returncode is not None:
                    break
                await asyncio.sleep(0.05)
                continue
            writer.close()
            break
        yield f"{scheme}://127.0.0.1:{port}", process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 20)


async def post(base: str, token: str | None, scheme: str = "Bearer") -> int:
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(base + "/v1/resolve", json=REQUEST, headers=headers) as response,
    ):
        if response.status == 401:
            assert response.headers["WWW-Authenticate"] == 'Bearer realm="mendpoint-resolver"'
        else:
            assert [o["skill_name"] for o in (await response.json())["options"]] == [
                "schema.infer_csv_schema"
            ]
        return response.status


async def refusals(base: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as session, session.get(base + "/metrics") as response:
        text = await response.text()
    counts = {}
    for reason in ("missing", "wrong"):
        line = f'mendpoint_resolver_auth_failures_total{{reason="{reason}"}}'
        counts[reason] = float(next(x for x in text.splitlines() if x.startswith(line)).split()[1])
    return counts


@pytest.mark.parametrize("via", ["flag", "env"])
async def test_401_without_the_token_200_with_it(via: str, tmp_path: Path) -> None:
    token_file = write(tmp_path / "token", f"{TOKEN}\n")
    args = ("--token-file", token_file) if via == "flag" else ()
    env = {TOKEN_ENV: token_file} if via == "env" else None
    async with resolver(tmp_path, *args, env=env) as (base, _):
        assert await post(base, None) == 401
        assert await post(base, OTHER) == 401
        assert await post(base, TOKEN[:-1]) == 401  # a prefix is not the token
        assert await post(base, TOKEN, scheme="Basic") == 401
        assert await post(base, TOKEN) == 200
        assert await post(base, TOKEN, scheme="bearer") == 200
        assert await refusals(base) == {"missing": 2.0, "wrong": 2.0}


async def test_a_rotated_token_file_is_read_again(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    write_secret(token_file, TOKEN)
    async with resolver(tmp_path, "--token-file", str(token_file)) as (base, _):
        assert await post(base, TOKEN) == 200
        write_secret(token_file, f"{OTHER}\n{TOKEN}\n")  # both accepted while gateways move over
        await asyncio.sleep(1.2)
        assert await post(base, OTHER) == 200 and await post(base, TOKEN) == 200
        write_secret(token_file, OTHER)
        await asyncio.sleep(1.2)
        assert await post(base, TOKEN) == 401 and await post(base, OTHER) == 200


def test_no_token_on_a_non_loopback_address_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    catalog = write(tmp_path / "catalog.yaml", CATALOG)
    for listen in ("0.0.0.0:8090", "[::]:8090", "resolver.internal:8090"):
        assert main(["resolver", "--config", catalog, "--listen", listen]) == 2
        stderr = capsys.readouterr().err
        assert "without authentication" in stderr and "--insecure-no-auth" in stderr


async def test_insecure_no_auth_serves_and_warns(tmp_path: Path) -> None:
    async with resolver(tmp_path, "--insecure-no-auth", listen="0.0.0.0") as (base, process):
        assert await post(base, None) == 200
        assert process.stderr is not None
        warning = await asyncio.wait_for(process.stderr.readline(), 10)
    assert b"WARNING" in warning and b"WITHOUT authentication" in warning


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "holds no token"),
        ("short\n", "the token has 5 characters; use at least 16"),
        ("x" * 20 + " y\n", "only visible ASCII"),
    ],
    ids=["empty", "short", "space"],
)
def test_an_unusable_token_file_stops_the_resolver(
    content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = write(tmp_path / "token", content)
    catalog = write(tmp_path / "catalog.yaml", CATALOG)
    argv = ["resolver", "--config", catalog, "--token-file", token_file]
    assert main(argv) == 1
    stderr = capsys.readouterr().err
    assert message in stderr and "x" * 20 not in stderr  # never the token itself


# --- the gateway side -------------------------------------------------------------------


def gateway_config(
    upstream: str, resolver_url: str, token_file: str | None, **resolver: Any
) -> dict[str, Any]:
    spec = {"url": resolver_url + "/v1/resolve", **resolver}
    if token_file is not None:
        spec["token_file"] = token_file
    return {
        "routes": [{"name": "data", "upstream": upstream, "mode": "envelope"}],
        "resolver": spec,
        "rules": [CSV_RULE],
    }


async def test_gateway_resolution_works_end_to_end_with_the_token_file(
    tmp_path: Path, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await start_upstream(csv_failing_upstream())
    token_file = write(tmp_path / "resolver-token", TOKEN + "\n")
    wrong_file = write(tmp_path / "wrong-token", OTHER)
    async with resolver(tmp_path, "--token-file", token_file) as (base, _):
        good = await start_gateway(gateway_config(upstream, base, token_file))
        bad = await start_gateway(gateway_config(upstream, base, wrong_file))
        for gateway, expected in ((good, ["schema.infer_csv_schema"]), (bad, [])):
            async with gateway.session.post(gateway.url + "/v1/csv") as response:
                body = json.loads(await response.read())
            assert response.status == 400
            assert [o["skill_name"] for o in body["recovery"]["options"]] == expected
        assert await refusals(base) == {"missing": 0.0, "wrong": 1.0}


def test_token_file_problems_name_file_line_and_field(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    config = tmp_path / "gateway.yaml"
    head = "routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\nresolver:\n"
    config.write_text(head + "  url: http://127.0.0.1:8090/v1/resolve\n  token_file: missing\n")
    with pytest.raises(ConfigError, match=r"gateway.yaml:5: resolver.token_file: cannot read"):
        load_config(str(config))
    write(tmp_path / "short", "abc")
    config.write_text(head + "  url: http://127.0.0.1:8090/v1/resolve\n  token_file: short\n")
    with pytest.raises(ConfigError, match=r"gateway.yaml:5: resolver.token_file: .*3 characters"):
        load_config(str(config))
    config.write_text(head + "  token_file: short\n")
    with pytest.raises(ConfigError, match=r"token_file is only used with url"):
        load_config(str(config))
    write(tmp_path / "token", TOKEN)
    config.write_text(head + "  url: http://127.0.0.1:8090/v1/resolve\n  token_file: token\n")
    loaded = load_config(str(config))
    assert loaded.resolver_token == TOKEN
    assert str(tmp_path / "token") in loaded.files  # a rotated token reloads the config
    assert TOKEN not in repr(loaded)
    monkeypatch.setenv(TOKEN_ENV, str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=rf"{TOKEN_ENV}: cannot read"):
        load_config(str(config))


# --- mutual TLS ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A throwaway CA (trustme), the resolver's certificate for 127.0.0.1 and a gateway's."""

    ca: str
    server_cert: str
    server_key: str
    client: str  # certificate and key in one file


def make_pki(root: Path) -> Pki:
    root.mkdir()
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("gateway.mendpoint.test")
    files = Pki(*(str(root / n) for n in ("ca.pem", "server.pem", "server.key", "client.pem")))
    ca.cert_pem.write_to_path(files.ca)
    server.cert_chain_pems[0].write_to_path(files.server_cert)
    server.private_key_pem.write_to_path(files.server_key)
    client.private_key_and_cert_chain_pem.write_to_path(files.client)
    return files


# A gateway's first call over TLS pays the handshake (mutual TLS: both certificates verified),
# which on a loaded machine outlasts the 50 ms default budget; these tests are about who is
# admitted, so the budget is set out of their way.
TLS_BUDGET = {"budget_ms": 2000}


async def options_through(gateway: RunningGateway) -> list[str]:
    async with gateway.session.post(gateway.url + "/v1/csv") as response:
        body = json.loads(await response.read())
    assert response.status == 400
    return [o["skill_name"] for o in body["recovery"]["options"]]


async def test_mutual_tls_admits_only_gateways_with_a_client_certificate(
    tmp_path: Path, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    pki = make_pki(tmp_path / "pki")
    upstream = await start_upstream(csv_failing_upstream())
    tls_args = ("--tls-cert", pki.server_cert, "--tls-key", pki.server_key)
    args = (*tls_args, "--tls-client-ca", pki.ca)
    async with resolver(tmp_path, *args, listen="0.0.0.0") as (base, process):
        assert process.returncode is None  # a client CA authenticates: no token needed
        mutual = {"ca_file": pki.ca, "cert_file": pki.client}
        with_cert = await start_gateway(
            gateway_config(upstream, base, None, tls=mutual, **TLS_BUDGET)
        )
        without = await start_gateway(
            gateway_config(upstream, base, None, tls={"ca_file": pki.ca}, **TLS_BUDGET)
        )
        assert await options_through(with_cert) == ["schema.infer_csv_schema"]
        assert await options_through(without) == []
        context = ssl.create_default_context(cafile=pki.ca)
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientError):  # the handshake itself is refused
                async with session.post(base + "/v1/resolve", json=REQUEST, ssl=context):
                    pass


async def test_tls_and_a_token_together(
    tmp_path: Path,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pki = make_pki(tmp_path / "pki")
    upstream = await start_upstream(csv_failing_upstream())
    token_file = write(tmp_path / "token", TOKEN)
    tls_args = ("--tls-cert", pki.server_cert, "--tls-key", pki.server_key)
    async with resolver(tmp_path, *tls_args, "--token-file", token_file) as (base, _):
        verified = {"ca_file": pki.ca}
        gateway = await start_gateway(
            gateway_config(upstream, base, token_file, tls=verified, **TLS_BUDGET)
        )
        untrusting = await start_gateway(gateway_config(upstream, base, token_file, **TLS_BUDGET))
        with caplog.at_level(logging.WARNING, logger="mendpoint.resolve"):
            insecure = await start_gateway(
                gateway_config(upstream, base, token_file, tls={"insecure": True}, **TLS_BUDGET)
            )
        assert await options_through(gateway) == ["schema.infer_csv_schema"]
        assert await options_through(untrusting) == []  # the test CA is not in the system store
        assert await options_through(insecure) == ["schema.infer_csv_schema"]
        assert any("NOT verified" in r.getMessage() for r in caplog.records)


def test_tls_problems_name_file_line_and_field(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    head = "routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\nresolver:\n"
    cases = {
        "  url: http://127.0.0.1:8090/v1/resolve\n  tls: {ca_file: ca.pem}\n": (
            "tls is only used with an https:// url"
        ),
        "  url: https://127.0.0.1:8090/v1/resolve\n  tls: {key_file: k.pem}\n": (
            "key_file needs cert_file"
        ),
        "  url: https://127.0.0.1:8090/v1/resolve\n  tls: {ca_file: nope.pem}\n": (
            "gateway.yaml:5: resolver.tls: cannot read a TLS file"
        ),
    }
    for text, message in cases.items():
        config.write_text(head + text)
        with pytest.raises(ConfigError) as caught:
            load_config(str(config))
        assert message in str(caught.value)


def test_resolver_tls_flags_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = write(tmp_path / "catalog.yaml", CATALOG)
    base = ["resolver", "--config", catalog]
    assert main([*base, "--tls-cert", "c.pem"]) == 1
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err
    assert main([*base, "--tls-client-ca", "ca.pem"]) == 1
    assert "needs --tls-cert" in capsys.readouterr().err
    assert main([*base, "--tls-cert", "c.pem", "--tls-key", "k.pem"]) == 1
    assert "cannot load --tls-cert/--tls-key c.pem" in capsys.readouterr().err
