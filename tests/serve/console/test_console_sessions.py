"""The console's sign-in cookie is a server-side session, never the admin token
(docs/security.md#console): a real `mendpoint serve --workers 2`, a real token file rotated
under it, and the cookie a browser would keep.

Cookies are not scoped to a port: with the token in the cookie, any service on the same host
under /ui received the admin listener's key (on main the cookie's value was the token).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import yaml

from gateway.resolve.auth import TokenFile
from gateway.serve.console.sessions import MAX_SESSIONS, ConsoleSessions
from tests.support.gateway import supervised
from tests.support.ports import free_port
from tests.support.secrets import write_secret
from tests.support.waits import patience

TOKEN = "5e55105e55105e55105e55105e551050"
ROTATED = "0707070707070707070707070707abcd"
COOKIE = "mendpoint_console"


async def signed_in(session: aiohttp.ClientSession, admin: str, token: str) -> str:
    """Sign in as the console's form does; the cookie value it sets."""
    form = {"token": token}
    headers = {"Origin": admin}
    async with session.post(
        admin + "/ui/login", data=form, headers=headers, allow_redirects=False
    ) as answer:
        assert answer.status == 303, await answer.text()
        morsel = answer.cookies[COOKIE]
        assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/ui"
        return morsel.value


async def status_with(admin: str, path: str, cookie: str) -> int:
    async with (
        aiohttp.ClientSession(cookies={COOKIE: cookie}) as session,
        session.get(admin + path, allow_redirects=False) as answer,
    ):
        await answer.read()
        return answer.status


async def test_the_cookie_is_a_session_that_ends_with_sign_out_and_with_the_token(
    tmp_path: Path,
) -> None:
    token_file = write_secret(tmp_path / "admin-token", TOKEN + "\n")
    admin_port = free_port()
    admin = f"http://127.0.0.1:{admin_port}"
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": f"127.0.0.1:{free_port()}",
                "admin": f"127.0.0.1:{admin_port}",
                "admin_token_file": str(token_file),
                "routes": [{"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}],
                "shutdown": {"drain_delay_s": 0, "grace_s": 2},
            }
        )
    )
    async with supervised(config, f"127.0.0.1:{admin_port}", tmp_path, workers=2):
        jar = aiohttp.DummyCookieJar()
        async with aiohttp.ClientSession(cookie_jar=jar) as session:
            first = await signed_in(session, admin, TOKEN)
            second = await signed_in(session, admin, TOKEN)
        assert TOKEN not in first and first != second and len(first) >= 40
        for path in ("/ui/routes", "/ui/gaps", "/ui/agents"):
            assert await status_with(admin, path, first) == 200, path
        # The session opens the console only; the token in the cookie opens nothing.
        assert await status_with(admin, "/metrics", first) == 401
        assert await status_with(admin, "/ui/routes", TOKEN) == 401
        assert await status_with(admin, "/ui/routes", first + "x") == 401

        # Signing out ends that session on the server, not only in the browser.
        assert await status_with(admin, "/ui/logout", first) == 303
        assert await status_with(admin, "/ui/routes", first) == 401
        assert await status_with(admin, "/ui/routes", second) == 200

        # A rotated token file signs out every session opened with the old token.
        write_secret(token_file, ROTATED + "\n")
        deadline = time.monotonic() + patience(10)
        while await status_with(admin, "/ui/routes", second) != 401:
            assert time.monotonic() < deadline, "the rotated token's sessions lived on"
            await asyncio.sleep(0.2)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
            third = await signed_in(session, admin, ROTATED)
        assert await status_with(admin, "/ui/routes", third) == 200


def test_a_session_expires_and_sessions_are_bounded(tmp_path: Path) -> None:
    """A session lives its lifetime however active, and sign-ins cannot grow memory."""
    now = [1000.0]
    tokens = TokenFile(str(write_secret(tmp_path / "t", TOKEN + "\n")), name="admin token file")
    sessions = ConsoleSessions(tokens, lifetime_s=60, clock=lambda: now[0])
    value = sessions.open(TOKEN)
    now[0] += 59
    assert sessions.valid(value)
    now[0] += 1
    assert not sessions.valid(value)
    assert len(sessions) == 0
    values = [sessions.open(TOKEN) for _ in range(MAX_SESSIONS + 5)]
    assert len(sessions) == MAX_SESSIONS
    assert not sessions.valid(values[0]) and sessions.valid(values[-1])
