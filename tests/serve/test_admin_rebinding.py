"""The admin listener against DNS rebinding (docs/security.md#dns-rebinding).

A page on a name the attacker rebinds to 127.0.0.1 reaches the loopback admin listener from
the operator's browser and sends its own name as `Host`. Without a token, every admin path
but the probes answers only a `Host` that is an IP address, `localhost` or a name of
`admin_hosts`; with a token the token decides. One gateway and the supervisor of
`serve --workers 2` are checked, over loopback with a real client.
"""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.config.secrets import ADMIN_TOKEN_ENV
from gateway.serve import workers
from gateway.serve.admin_guard import answered_host
from tests.support.gateway import StartGateway, StartUpstream, supervised
from tests.support.ports import free_port
from tests.support.secrets import write_secret

GUARDED = ("/metrics", "/gaps", "/followups", "/ui", "/ui/static/console.css", "/no-such-path")
PROBES = ("/healthz", "/readyz")
TOKEN = "5eb1d1ng5eb1d1ng5eb1d1ng5eb1d1ng"
FOREIGN = "evil.example:8491"


def ok_app() -> web.Application:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/{tail:.*}", ok)
    return app


async def status_of(url: str, host: str | None, token: str | None = None) -> tuple[int, str]:
    headers = {} if host is None else {"Host": host}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as answer:
        return answer.status, await answer.text()


async def test_a_foreign_host_is_refused_on_every_path_but_the_probes(
    start_gateway: StartGateway, start_upstream: StartUpstream
) -> None:
    upstream = await start_upstream(ok_app())
    config = {
        "admin_hosts": ["Metrics.Internal"],
        "routes": [{"name": "api", "upstream": upstream}],
    }
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    base = f"http://{host}:{port}"
    for path in GUARDED:
        status, text = await status_of(base + path, FOREIGN)
        assert status == 403, path
        assert "admin_hosts" in text and "evil.example" in text
    for path in PROBES:
        assert (await status_of(base + path, FOREIGN))[0] == 200, path
    # The listener's own address, loopback names and the configured name, however written.
    for name in (
        f"127.0.0.1:{port}",
        "127.0.0.1",
        f"localhost:{port}",
        "LOCALHOST",
        f"[::1]:{port}",
        "192.0.2.7:8491",
        "metrics.internal:8491",
        "METRICS.internal",
        None,  # the client's own: the address it connected to
    ):
        for path in ("/metrics", "/gaps", "/ui"):
            assert (await status_of(base + path, name))[0] == 200, (name, path)
    assert (await status_of(base + "/metrics", "internal"))[0] == 403
    assert (await status_of(base + "/metrics", "metrics.internal.evil.example"))[0] == 403
    # The console's refusal carries its security headers too.
    async with (
        aiohttp.ClientSession() as session,
        session.get(base + "/ui", headers={"Host": FOREIGN}) as answer,
    ):
        assert answer.status == 403
        assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]


async def test_with_a_token_the_token_decides_whatever_the_host(
    start_gateway: StartGateway, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """A rebound page has no token to send: 401; a scraper naming a Service has one: 200."""
    upstream = await start_upstream(ok_app())
    tokens = tmp_path / "admin-token"
    write_secret(tokens, TOKEN + "\n")
    config = {"admin_token_file": str(tokens), "routes": [{"name": "api", "upstream": upstream}]}
    gateway = await start_gateway(config, admin="127.0.0.1:0")
    assert gateway.server.admin_address is not None
    host, port = gateway.server.admin_address
    base = f"http://{host}:{port}"
    assert (await status_of(base + "/metrics", FOREIGN))[0] == 401
    assert (await status_of(base + "/metrics", FOREIGN, TOKEN))[0] == 200
    assert (await status_of(base + "/gaps", "mendpoint-admin.monitoring.svc", TOKEN))[0] == 200


@pytest.mark.parametrize(
    ("host", "answered"),
    [
        ("127.0.0.1:8491", True),
        ("10.0.0.3", True),
        ("[fe80::1]:80", True),
        ("::1", False),  # IPv6 in Host is bracketed (RFC 3986): malformed, so refused
        ("LocalHost:8491", True),
        ("known.example:1", True),
        ("evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("localhost.evil.example", False),
        ("[evil.example]", False),
        (None, True),  # absent: not a browser's request, which always names its host
    ],
)
def test_which_hosts_are_answered(host: str | None, answered: bool) -> None:
    assert answered_host(host, frozenset({"known.example"})) is answered


@pytest.mark.parametrize("name", ["http://metrics.internal", "metrics.internal:9090", "a b", ""])
def test_a_bad_admin_host_is_a_config_error_with_its_line(name: str, tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "routes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n"
        f"admin_hosts:\n  - ok.example\n  - {name!r}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_config(str(path))
    message = str(raised.value)
    assert f"{path}:4: admin_hosts[1]:" in message and "not a DNS name" in message


@pytest.mark.skipif(not workers.supported(), reason="--workers needs Linux")
async def test_the_supervisors_admin_listener_refuses_a_foreign_host_too(
    start_upstream: StartUpstream, tmp_path: Path
) -> None:
    upstream = await start_upstream(ok_app())
    port, admin = free_port(), free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": f"127.0.0.1:{port}",
                "admin": f"127.0.0.1:{admin}",
                "admin_hosts": ["scrape.internal"],
                "routes": [{"name": "api", "upstream": upstream}],
            }
        )
    )
    base = f"http://127.0.0.1:{admin}"
    environ = {k: v for k, v in os.environ.items() if k != ADMIN_TOKEN_ENV}
    async with supervised(config, f"127.0.0.1:{admin}", tmp_path, env=environ):
        assert (await status_of(base + "/metrics", FOREIGN))[0] == 403
        assert (await status_of(base + "/gaps", FOREIGN))[0] == 403
        assert (await status_of(base + "/readyz", FOREIGN))[0] == 200
        assert (await status_of(base + "/metrics", "scrape.internal:9"))[0] == 200
        assert (await status_of(base + "/metrics", f"127.0.0.1:{admin}"))[0] == 200
