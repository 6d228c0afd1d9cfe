"""The console's routes on the admin app: /ui and its four pages, sign-in, and its assets.

And the draft page with its two forms (gateway.serve.console.drafting says who may write).

The admin app adds them when it is given the running config (`build_admin_app(console=…)`);
its token check covers them as it covers every admin path, a console page also opened by the
session cookie /ui/login sets (a random value, never the token: .sessions), since a browser's
page loads carry no Authorization header (docs/security.md#console).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import hdrs, web
from multidict import CIMultiDict

from gateway.config.loaded import LoadedConfig
from gateway.failure import Mode, TransportKind
from gateway.feedback.readings import reading
from gateway.feedback.signatures import DEFAULT_WINDOW_S, Gap
from gateway.fence.aiohttp_private import Handler, Middleware
from gateway.offline.explain import Sample, SampleError, explain, parse_header, render_explanation
from gateway.resolve.auth import TokenFile
from gateway.telemetry.metrics import ADMIN_AUTH_FAILURES

from . import charts, draft_html, drafting, html, timeline, views
from .sessions import ConsoleSessions
from .window import RecentCounts

PREFIX = "/ui"
LOGIN = "/ui/login"
COOKIE = "mendpoint_console"
REFRESH_S = 10
SECURITY_HEADERS = {
    # No inline script, nothing from elsewhere, no framing: an upstream's text that slipped
    # past escaping still could not run (docs/security.md#console).
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: with no-referrer a browser posts the forms as Origin: null.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
ASSETS = {
    "console.css": "text/css",
    "console.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}

Ranked = Sequence[Gap]
DRAFT_KEYS = ("route", "status", "signature")


@dataclass(frozen=True, slots=True)
class ConsoleSources:
    """What the pages read: the admin app's own sources, and the running config."""

    config: Callable[[], LoadedConfig]
    gaps: Callable[[int, float], Awaitable[tuple[Ranked, dict[str, object]]]]
    """/gaps's source: the ranking and whose it is (fleet, workers or this process)."""
    followups: Callable[[], Awaitable[tuple[float, list[dict[str, Any]], dict[str, object]]]] | None
    counts: RecentCounts
    tokens: TokenFile | None
    sessions: ConsoleSessions | None
    """Sign-in sessions: with `tokens`, always."""
    reload: drafting.Reload | None = None
    """What "Save" calls after writing: the gateway's reload (else its file watcher sees it)."""


SOURCES: web.AppKey[ConsoleSources] = web.AppKey("mendpoint_console")


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def console_refusal(
    request: web.Request, tokens: TokenFile, sessions: ConsoleSessions
) -> str | None:
    """Why a console request is refused (`missing`, `wrong`), or None: its Authorization
    header when it sends one, else its sign-in session."""
    header = request.headers.get(hdrs.AUTHORIZATION)
    if header is not None:
        return tokens.check(header)
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        return "missing"
    return None if sessions.valid(cookie) else "wrong"


def refused(status: int = 401, message: str | None = None) -> web.Response:
    """The sign-in page, as the answer to a console request without an accepted token."""
    response = web.Response(text=html.login(message), status=status, content_type="text/html")
    response.headers[hdrs.WWW_AUTHENTICATE] = 'Bearer realm="mendpoint-admin"'
    response.headers.update(SECURITY_HEADERS)
    return response


def guard() -> Middleware:
    """Security headers on every console answer, a refusal included; and a POST only from
    the console's own pages. (Without a token, a rebound DNS name is refused before this, as
    on every admin path: gateway.serve.admin_guard.)"""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not is_console(request.path):
            return await handler(request)
        origin = request.headers.get(hdrs.ORIGIN)
        if request.method == "POST" and origin is not None and not _same_origin(origin, request):
            return _plain(403, "a console form may be posted only from the console")
        response = await handler(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    return check


def _same_origin(origin: str, request: web.Request) -> bool:
    return origin == f"{request.scheme}://{request.host}"


def _plain(status: int, text: str) -> web.Response:
    response = web.Response(text=text + "\n", status=status)
    response.headers.update(SECURITY_HEADERS)
    return response


def add_console(app: web.Application, sources: ConsoleSources) -> None:
    app[SOURCES] = sources
    app.router.add_get(PREFIX, _routes)
    app.router.add_get(PREFIX + "/", _routes)
    app.router.add_get(PREFIX + "/routes", _routes)
    app.router.add_get(PREFIX + "/gaps", _gaps)
    app.router.add_get(PREFIX + "/agents", _agents)
    app.router.add_get(PREFIX + "/try", _try_form)
    app.router.add_post(PREFIX + "/try", _try_post)
    app.router.add_get(draft_html.DRAFT, _draft)
    app.router.add_post(draft_html.DRAFT + "/try", _draft_try)
    app.router.add_post(draft_html.DRAFT + "/save", _draft_save)
    app.router.add_post(PREFIX + "/mode", _mode)
    app.router.add_post(LOGIN, _login)
    app.router.add_get(LOGIN, _login_form)
    app.router.add_get(PREFIX + "/logout", _logout)
    app.router.add_get(PREFIX + "/static/{name}", _asset)
    app.cleanup_ctx.append(_ticking)


async def _ticking(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.get_running_loop().create_task(app[SOURCES].counts.run())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _page(current: str, title: str, body: str, request: web.Request | None = None) -> web.Response:
    """`request` given: a page of figures, which refreshes itself every REFRESH_S seconds
    (or `?refresh=N`, 1 to 300)."""
    refresh = None
    if request is not None:
        try:
            refresh = max(1, min(300, int(request.query.get("refresh", REFRESH_S))))
        except ValueError:
            refresh = REFRESH_S
    text = html.page(current, title, body, refresh_s=refresh)
    return web.Response(text=text, content_type="text/html")


async def _routes(request: web.Request, said: str = "") -> web.Response:
    """`said`: what a mode move did (POST /ui/mode), above the table; that page does not
    refresh itself (a refresh would post again)."""
    sources = request.app[SOURCES]
    recent = sources.counts.recent()
    loaded = sources.config()
    rows = views.route_rows(loaded.config, recent)
    hour = timeline.hour(sources.counts.minutes())
    movable = drafting.can_save(loaded, sources.tokens is not None) is None
    body = html.routes(rows, recent, movable) + charts.routes_charts(hour, [r.name for r in rows])
    return _page("routes", "Routes", said + body, None if said else request)


async def _gaps(request: web.Request) -> web.Response:
    sources = request.app[SOURCES]
    top, scope = await sources.gaps(views.MAX_GAPS_SHOWN, DEFAULT_WINDOW_S)
    loaded = sources.config()
    records = await views.captured(loaded.config)
    body = html.scope(scope) + html.gaps(await views.gaps(top, records, loaded))
    return _page("gaps", "Gaps", body, request)


async def _agents(request: web.Request) -> web.Response:
    source = request.app[SOURCES].followups
    if source is None:
        return _page("agents", "Agents", html.agents([], None, {}))
    window_s, rows, scope = await source()
    readings = {(str(r["route"]), str(r["code"])): reading(r) for r in rows}
    body = html.scope(scope) + html.agents(views.agent_rows(rows), window_s, readings)
    body += charts.recovery_charts(timeline.hour(request.app[SOURCES].counts.minutes()))
    return _page("agents", "Agents", body, request)


async def _draft_page(
    request: web.Request, fields: dict[str, str], action: str | None = None
) -> web.Response:
    """The editor for the gap `fields` names; `action` "try" or "save" runs that first."""
    sources = request.app[SOURCES]
    loaded = sources.config()
    top, _ = await sources.gaps(views.MAX_GAPS_SHOWN, DEFAULT_WINDOW_S)
    fields, samples, note = await drafting.open_draft(loaded, top, fields)
    result = draft_html.refusal(note) if note else ""
    if action == "try":
        result += await drafting.tried(loaded, fields.get("rules", ""), samples)
    elif action == "save":
        result += await drafting.save(
            loaded, fields.get("rules", ""), sources.reload, drafting.who(request)
        )
    can_save = drafting.can_save(loaded, sources.tokens is not None)
    return _page("gaps", "Draft a rule", draft_html.draft_form(fields, can_save, result))


async def _draft(request: web.Request) -> web.Response:
    return await _draft_page(request, {k: request.query.get(k, "") for k in DRAFT_KEYS})


async def _draft_try(request: web.Request) -> web.Response:
    return await _draft_page(request, await _posted(request), "try")


async def _draft_save(request: web.Request) -> web.Response:
    """404 without `console.drafts_file`, 403 without an admin token: a clear body each."""
    loaded = request.app[SOURCES].config()
    refusal = drafting.can_save(loaded, request.app[SOURCES].tokens is not None)
    if refusal is not None:
        drafting.log.warning("console: save refused (from %s): %s", drafting.who(request), refusal)
        return _plain(404 if loaded.drafts_file is None else 403, refusal)
    return await _draft_page(request, await _posted(request), "save")


async def _mode(request: web.Request) -> web.Response:
    """A route's mode one step (headers → additive): see drafting.move_mode; the Routes page
    again, under what was done or refused."""
    sources = request.app[SOURCES]
    loaded = sources.config()
    refusal = drafting.can_save(loaded, sources.tokens is not None)
    if refusal is not None:
        return _plain(404 if loaded.drafts_file is None else 403, refusal)
    route = str((await request.post()).get("route", ""))
    status, said = await drafting.move_mode(loaded, route, sources.reload, drafting.who(request))
    response = await _routes(request, said)
    response.set_status(status)
    return response


async def _posted(request: web.Request) -> dict[str, str]:
    form = await request.post()
    fields = {k: str(v) for k, v in form.items() if isinstance(v, str)}
    if "rules" in fields:
        fields["rules"] = _lines(fields["rules"])
    return fields


async def _try_form(request: web.Request) -> web.Response:
    sources = request.app[SOURCES]
    loaded = sources.config()
    records = await views.captured(loaded.config)
    fields: dict[str, str] = {}
    result = ""
    wanted = request.query.get("sample")
    if wanted:
        record = next((r for r in records if str(r.get("request_id")) == wanted), None)
        if record is None:
            result = html.try_error(f"no captured sample {wanted!r} (the newest are read)")
        else:
            fields = _fields_of(views.sample_from_capture(record), str(record.get("route", "")))
            fields["sample"] = wanted
    return _try_page(loaded, fields, records, result)


async def _try_post(request: web.Request) -> web.Response:
    sources = request.app[SOURCES]
    loaded = sources.config()
    form = await request.post()
    fields = {k: str(v) for k, v in form.items() if isinstance(v, str)}
    records = await views.captured(loaded.config)
    try:
        sample, mode = _sample_of(fields)
        result = await explain(loaded, sample, mode)
    except (SampleError, ValueError) as exc:
        return _try_page(loaded, fields, records, html.try_error(str(exc)))
    wanted = fields.get("route")
    if wanted and wanted != result.route:
        note = html.try_error(
            f"path {sample.path} belongs to route {result.route}, not {wanted}: shown for "
            f"{result.route}"
        )
    else:
        note = ""
    fields["route"] = result.route
    return _try_page(
        loaded, fields, records, note + html.try_result(result, render_explanation(result))
    )


def _try_page(
    loaded: LoadedConfig, fields: dict[str, str], records: list[dict[str, Any]], result: str
) -> web.Response:
    routes = [(spec.name, spec.prefix) for spec in loaded.config.routes]
    body = html.try_form(routes, fields, views.capture_choices(records), result)
    return _page("try", "Try a rule", body)


def _lines(text: str) -> str:
    """A textarea's value: browsers send its line breaks as CRLF, whatever was pasted."""
    return text.replace("\r\n", "\n")


def _sample_of(fields: dict[str, str]) -> tuple[Sample, Mode]:
    transport = fields.get("transport") or None
    status_text = fields.get("status", "").strip()
    if (transport is None) == (not status_text):
        raise ValueError("give exactly one of a status or a transport fault")
    status = None
    if status_text:
        status = int(status_text)
        if not 100 <= status <= 599:
            raise ValueError(f"status {status} is not an HTTP status")
    return (
        Sample(
            method=fields.get("method", "GET").strip().upper() or "GET",
            path=fields.get("path", "/").strip() or "/",
            status=status,
            headers=_headers(fields.get("headers", ""), "response header"),
            body=_lines(fields.get("body", "")).encode(),
            transport=TransportKind(transport) if transport else None,
            request_headers=_headers(fields.get("request_headers", ""), "request header"),
        ),
        Mode(fields.get("mode", Mode.ENVELOPE.value)),
    )


def _headers(text: str, what: str) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    for line in _lines(text).split("\n"):
        if not line.strip():
            continue
        pair = parse_header(line)
        if pair is None:
            raise ValueError(f"{what} {line!r} must be Name: value")
        headers.add(*pair)
    return headers


def _fields_of(sample: Sample, route: str) -> dict[str, str]:
    return {
        "route": route,
        "method": sample.method,
        "path": sample.path,
        "status": "" if sample.status is None else str(sample.status),
        "transport": "" if sample.transport is None else sample.transport.value,
        "headers": "\n".join(f"{k}: {v}" for k, v in sample.headers.items()),
        "body": sample.body.decode("utf-8", "replace"),
        "mode": Mode.ENVELOPE.value,
    }


async def _login_form(request: web.Request) -> web.Response:
    return refused(200)


async def _login(request: web.Request) -> web.Response:
    """Check the posted token as a bearer token is checked; give a session for it in a cookie
    only /ui paths get, never sent cross-site, never readable by script."""
    tokens, sessions = request.app[SOURCES].tokens, request.app[SOURCES].sessions
    form = await request.post()
    token = str(form.get("token", "")).strip()
    if tokens is not None:
        reason = tokens.check(f"Bearer {token}" if token else None)
        if reason is not None:
            ADMIN_AUTH_FAILURES.labels(reason=reason).inc()
            return refused(401, "that is not a token of the admin_token_file")
    response = _see(PREFIX + "/routes")
    if sessions is not None:
        value = sessions.open(token)
        response.set_cookie(COOKIE, value, httponly=True, samesite="Strict", path=PREFIX)
    return response


async def _logout(request: web.Request) -> web.Response:
    sessions = request.app[SOURCES].sessions
    if sessions is not None:
        sessions.close(request.cookies.get(COOKIE))
    response = _see(LOGIN)
    response.del_cookie(COOKIE, path=PREFIX)
    return response


def _see(location: str) -> web.Response:
    return web.Response(status=303, headers={hdrs.LOCATION: location})


async def _asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kind = ASSETS.get(name)
    if kind is None:
        raise web.HTTPNotFound()
    data = resources.files("gateway.serve.console").joinpath("static", name).read_bytes()
    return web.Response(body=data, content_type=kind)
