"""TLS upstreams, direct and through the gateway, with certificates made in the test.

A TLS failure is its own transport kind: a 502 `UPSTREAM_TLS_ERROR` that is not retryable
(the same request will fail the same way until someone fixes a certificate), with no
`Retry-After`, and a log line that names the certificate problem. Per-route `tls:` settings
(CA file, client certificate, server name, insecure) make the same upstreams reachable, and
then the answer is the one a client gets going direct with the same trust.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from tests.support.gateway import StartGateway, route_config, write_config
from tests.support.tls import tls_upstream, write_pem


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def tls_route(url: str, **tls: Any) -> dict[str, Any]:
    return route_config(url, mode="envelope", **({"tls": tls} if tls else {}))


async def direct(url: str, verify: ssl.SSLContext) -> httpx.Response:
    async with httpx.AsyncClient(verify=verify) as client:
        return await client.get(url + "/hello")


async def through(gateway_url: str) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.get(gateway_url + "/hello")


def assert_same(direct: httpx.Response, proxied: httpx.Response) -> None:
    assert (proxied.status_code, proxied.content) == (direct.status_code, direct.content)
    assert proxied.headers["X-Upstream"] == direct.headers["X-Upstream"]


def assert_tls_failure(response: httpx.Response) -> None:
    assert response.status_code == 502
    body = response.json()
    assert body["error"]["code"] == "UPSTREAM_TLS_ERROR"
    assert body["error"]["retryable"] is False
    assert body["failure"]["category"] == "UNAVAILABLE"
    assert "Retry-After" not in response.headers


async def test_an_untrusted_certificate_is_a_tls_failure_that_names_the_problem(
    ca: trustme.CA, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    async with tls_upstream(ca.issue_cert("127.0.0.1")) as url:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await direct(url, ssl.create_default_context())  # direct fails the same way
        gateway = await start_gateway(tls_route(url))
        with caplog.at_level(logging.WARNING, logger="mendpoint.upstream"):
            assert_tls_failure(await through(gateway.url))
    assert "certificate verify failed: unable to get local issuer certificate" in caplog.text


async def test_ca_file_trusts_a_private_ca(
    ca: trustme.CA, tmp_path: Path, start_gateway: StartGateway
) -> None:
    ca_file = write_pem(tmp_path, "ca.pem", ca.cert_pem)
    async with tls_upstream(ca.issue_cert("127.0.0.1")) as url:
        expected = await direct(url, ssl.create_default_context(cafile=ca_file))
        gateway = await start_gateway(tls_route(url, ca_file=ca_file))
        assert_same(expected, await through(gateway.url))
    assert expected.json() == {"tls": True, "client": None}


async def test_client_certificate_for_mtls(
    ca: trustme.CA, tmp_path: Path, start_gateway: StartGateway
) -> None:
    ca_file = write_pem(tmp_path, "ca.pem", ca.cert_pem)
    client = ca.issue_cert("gateway.internal", common_name="gateway.internal")
    cert_file = write_pem(tmp_path, "client.pem", client.cert_chain_pems[0])
    key_file = write_pem(tmp_path, "client.key", client.private_key_pem)
    async with tls_upstream(ca.issue_cert("127.0.0.1"), client_ca=ca) as url:
        verify = ssl.create_default_context(cafile=ca_file)
        verify.load_cert_chain(cert_file, key_file)
        expected = await direct(url, verify)
        with_cert = await start_gateway(
            tls_route(url, ca_file=ca_file, cert_file=cert_file, key_file=key_file)
        )
        assert_same(expected, await through(with_cert.url))
        without = await start_gateway(tls_route(url, ca_file=ca_file))
        assert_tls_failure(await through(without.url))
    assert expected.json() == {"tls": True, "client": "gateway.internal"}


async def test_server_name_is_sent_and_verified(
    ca: trustme.CA, tmp_path: Path, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream is addressed by IP but its certificate names only api.internal."""
    ca_file = write_pem(tmp_path, "ca.pem", ca.cert_pem)
    async with tls_upstream(ca.issue_cert("api.internal")) as url:
        named = await start_gateway(tls_route(url, ca_file=ca_file, server_name="api.internal"))
        answer = await through(named.url)
        assert (answer.status_code, answer.json()) == (200, {"tls": True, "client": None})
        unnamed = await start_gateway(tls_route(url, ca_file=ca_file))
        with caplog.at_level(logging.WARNING, logger="mendpoint.upstream"):
            assert_tls_failure(await through(unnamed.url))
    assert "mismatch, certificate is not valid for '127.0.0.1'" in caplog.text


async def test_insecure_skips_verification_and_says_so_at_start(
    ca: trustme.CA, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    async with tls_upstream(ca.issue_cert("127.0.0.1")) as url:
        with caplog.at_level(logging.WARNING, logger="mendpoint"):
            gateway = await start_gateway(tls_route(url, insecure=True))
        assert "NOT verified (tls.insecure: true)" in caplog.text
        answer = await through(gateway.url)
    assert (answer.status_code, answer.json()) == (200, {"tls": True, "client": None})


async def test_reading_the_trust_store_is_not_counted_against_the_connect_timeout(
    ca: trustme.CA, tmp_path: Path, start_gateway: StartGateway
) -> None:
    """A route's SSL context is built on its first connection, and reading its CA file takes
    tens of milliseconds (far more on a loaded machine or a slow disk). `connect_timeout_s`
    is the upstream's time to accept and finish the handshake: the gateway's own read must
    not turn into a 504 UPSTREAM_CONNECT_TIMEOUT. The CA file here is a FIFO whose second
    read (the first connection's, after the config load's) is held back longer than the
    timeout."""
    ca_file = tmp_path / "ca.pem"
    os.mkfifo(ca_file)
    pem = ca.cert_pem.bytes()
    held_s, timeout_s = 1.5, 1.0

    loaded = threading.Event()

    def serve_file() -> None:
        for delay in (0.0, held_s):
            with contextlib.suppress(BrokenPipeError), ca_file.open("wb") as out:
                time.sleep(delay)  # the reader has opened the file and waits for its bytes
                out.write(pem)
            loaded.wait(30)  # the config load's reader is gone: the next open is the dialer's

    writer = threading.Thread(target=serve_file, daemon=True)
    writer.start()
    try:
        async with tls_upstream(ca.issue_cert("127.0.0.1")) as url:
            route = tls_route(url, ca_file=str(ca_file))
            gateway = await start_gateway(route | {"limits": {"connect_timeout_s": timeout_s}})
            loaded.set()
            answer = await through(gateway.url)
        assert (answer.status_code, answer.json()) == (200, {"tls": True, "client": None})
    finally:
        loaded.set()
        if writer.is_alive():  # a read that never came: open the FIFO to let the writer go
            os.close(os.open(ca_file, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(held_s + 5)


@pytest.mark.parametrize(
    ("route", "message"),
    [
        pytest.param(
            {"upstream": "http://127.0.0.1:9", "tls": {"insecure": True}},
            "tls is only for https:// upstreams",
            id="tls-on-http",
        ),
        pytest.param(
            {"upstream": "https://127.0.0.1:9", "tls": {"ca_file": "missing-ca.pem"}},
            "cannot read a TLS file",
            id="missing-ca-file",
        ),
        pytest.param(
            {"upstream": "https://127.0.0.1:9", "tls": {"key_file": "k.pem"}},
            "key_file needs cert_file",
            id="key-without-cert",
        ),
    ],
)
def test_bad_tls_settings_are_config_errors_with_a_line(
    route: dict[str, Any], message: str, tmp_path: Path
) -> None:
    path = write_config(tmp_path, {"routes": [{"name": "api", "prefix": "/", **route}]})
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    text = str(caught.value)
    assert message in text
    assert f"{path}:" in text
