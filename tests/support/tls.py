"""Real TLS upstreams on loopback with certificates made in the test (trustme)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import trustme
from aiohttp import web


def tls_app() -> web.Application:
    async def hello(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in peer["subject"]) if peer else {}
        return web.json_response(
            {"tls": True, "client": subject.get("commonName")}, headers={"X-Upstream": "tls"}
        )

    app = web.Application()
    app.router.add_get("/hello", hello)
    return app


@contextlib.asynccontextmanager
async def tls_upstream(
    cert: trustme.LeafCert,
    client_ca: trustme.CA | None = None,
    app: web.Application | None = None,
) -> AsyncIterator[str]:
    """An aiohttp app (`tls_app()` unless given) over TLS with `cert`; with `client_ca` it
    requires a client certificate that CA issued (mTLS). Yields the https:// base URL."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(context)
        # With TLS 1.3 a server refuses a client certificate only after the client finished
        # its handshake, and Python's server then just closes: that reaches the gateway as a
        # plain close. TLS 1.2 refuses it in the handshake, as the failure path can name.
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    runner = web.AppRunner(app or tls_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def write_pem(directory: Path, name: str, blob: trustme.Blob) -> str:
    path = directory / name
    blob.write_to_path(str(path))
    return str(path)
