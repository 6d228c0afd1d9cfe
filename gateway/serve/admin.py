"""The admin listener: /metrics, /healthz, /readyz, /gaps (and `POST /gaps/reset`),
/followups and /config, on its own port.

Kept off the data-path port so probes and scrapes never compete with, or get routed like,
client traffic, and so it can stay loopback-only while the gateway port is public. Where it
cannot (a kubelet probes the Pod's address), `admin_token_file` makes every path but
/healthz and /readyz need a bearer token, checked as the resolver checks its own
(resolve.auth.TokenFile: constant-time, the file re-read when it changes); without one, a
listener on a non-loopback address is warned about at start (docs/security.md#admin-authentication).

One gateway process serves it from its own state. Under `serve --workers N` the supervisor
serves it instead (gateway.serve.workers), from sources that span every worker: the same app, given
the metrics body, the gaps, the follow-up tables and the worker list as functions. With a
fleet store (`fleet:`), /gaps and /followups answer for the whole fleet from the store, and
each answer's `scope` says which: `fleet`, `workers` (one host's) or `process`
(docs/operations.md#fleet).
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from aiohttp import hdrs, web

from gateway.config.loaded import LoadedConfig
from gateway.config.secrets import ADMIN_TOKEN_ENV, TokenError, read_tokens
from gateway.feedback.followups import FollowupBook, rank
from gateway.feedback.shared import SharedTracking
from gateway.feedback.signatures import (
    DEFAULT_WINDOW_S,
    MAX_WINDOW_S,
    Gap,
    SignatureBook,
)
from gateway.feedback.store import StoreDown
from gateway.fence.aiohttp_private import Handler, Middleware
from gateway.offline.coverage import Coverage
from gateway.resolve.auth import TokenFile
from gateway.serve.admin_guard import OPEN_PATHS, rebinding_guard
from gateway.serve.console.pages import (
    LOGIN,
    ConsoleSources,
    add_console,
    console_refusal,
    guard,
    is_console,
)
from gateway.serve.console.pages import refused as console_refused
from gateway.serve.console.sessions import ConsoleSessions
from gateway.serve.console.window import RecentCounts, Samples
from gateway.serve.listeners import is_loopback
from gateway.telemetry.metrics import (
    ADMIN_AUTH_FAILURES,
    METRICS_CONTENT_TYPE,
    console_samples,
    exposition,
)

log = logging.getLogger("mendpoint")

ReadyCheck = Callable[[], bool]
Ranked = Sequence[Gap]
Scope = dict[str, object]
"""Whose figures an answer holds: {"scope": "fleet"|"workers"|"process", ...} and, while a
configured store is down, why the figures are this process's alone."""
GapsSource = Callable[[int, float], Awaitable[tuple[Ranked, Scope]]]
"""The top gaps (at most the first argument) with failures inside the window (the second,
in seconds), and their scope."""
GapsReset = Callable[[], Awaitable[Scope]]
"""Start the gaps' counts afresh; the scope says whose were reset."""
Details = Callable[[], dict[str, object]]
FollowupTable = tuple[float, list[dict[str, object]], Scope]
"""The window in seconds, the ranked rows (gateway.feedback.followups.rank) and their scope."""
FollowupsSource = Callable[[], Awaitable[FollowupTable]]
READY_CHECK: web.AppKey[ReadyCheck] = web.AppKey("mendpoint_ready_check")
GAPS: web.AppKey[GapsSource] = web.AppKey("mendpoint_gaps")
METRICS: web.AppKey[Callable[[], bytes]] = web.AppKey("mendpoint_metrics")
DETAILS: web.AppKey[Details | None] = web.AppKey("mendpoint_details")
FOLLOWUPS: web.AppKey[FollowupsSource | None] = web.AppKey("mendpoint_followup_tables")
ConfigStatus = Callable[[], dict[str, Any]]
"""`GET /config`'s answer (gateway.config.watch.ConfigRecord.to_json), for the console too."""
CONFIG_STATUS: web.AppKey[ConfigStatus | None] = web.AppKey("mendpoint_config_status")
GAPS_RESET: web.AppKey[GapsReset | None] = web.AppKey("mendpoint_gaps_reset")
RUNNING: web.AppKey[Callable[[], LoadedConfig] | None] = web.AppKey("mendpoint_running_config")
COVERAGE: web.AppKey[Coverage] = web.AppKey("mendpoint_gaps_coverage")
TOKENS: web.AppKey[TokenFile | None] = web.AppKey("mendpoint_admin_tokens")
MAX_GAPS = 200


def build_admin_app(
    is_ready: ReadyCheck,
    signatures: SignatureBook | GapsSource,
    *,
    metrics: Callable[[], bytes] = exposition,
    details: Details | None = None,
    followups: FollowupBook | FollowupsSource | None = None,
    tokens: TokenFile | None = None,
    shared: SharedTracking | None = None,
    config: Callable[[], LoadedConfig] | None = None,
    config_status: ConfigStatus | None = None,
    counters: Samples | None = None,
    hosts: Collection[str] = (),
    reset: GapsReset | None = None,
    reload: Callable[[], Awaitable[bool]] | None = None,
) -> web.Application:
    """`signatures` is this process's book, or a function ranking gaps from elsewhere (and
    `reset`, what starts them afresh); `details` adds fields (the supervisor's worker list)
    to the /readyz answer; `tokens`, the bearer tokens every path but the probes' requires;
    without them, only a `Host` that is an address or one of `hosts` is answered
    (gateway.serve.admin_guard); `shared`, the fleet store the books count in, which answers
    while it is up. With `config` (the running config) each gap says which rule now covers
    it, and the console is served at /ui, its figures read from `counters` (by default this
    process's own); with `config_status`, /config answers it; `reload` is what the console's
    "Save" calls after writing `console.drafts_file`."""
    sessions = None if tokens is None else ConsoleSessions(tokens)
    middlewares = [
        rebinding_guard(hosts) if sessions is None else _token_required(sessions.tokens, sessions)
    ]
    if config is not None:
        middlewares.insert(0, guard())
    app = web.Application(middlewares=middlewares)
    app[READY_CHECK] = is_ready
    if isinstance(signatures, SignatureBook):
        app[GAPS] = local_gaps(signatures, shared)
        app[GAPS_RESET] = local_reset(signatures, shared)
    else:
        app[GAPS], app[GAPS_RESET] = signatures, reset
    app[RUNNING] = config
    app[COVERAGE] = Coverage()
    app[TOKENS] = tokens
    app[METRICS] = metrics
    app[DETAILS] = details
    app[FOLLOWUPS] = (
        local_followups(followups, shared) if isinstance(followups, FollowupBook) else followups
    )
    app[CONFIG_STATUS] = config_status
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/gaps", _gaps)
    app.router.add_post("/gaps/reset", _reset_gaps)
    app.router.add_get("/followups", _followups)
    app.router.add_get("/config", _config)
    if config is not None:
        counts = RecentCounts(counters or console_samples())
        sources = ConsoleSources(
            config, app[GAPS], app[FOLLOWUPS], counts, tokens, sessions, reload
        )
        add_console(app, sources)
    return app


REALM = 'Bearer realm="mendpoint-admin"'
NEEDS_TOKEN = (
    "this admin path needs Authorization: Bearer TOKEN, a token of the gateway's "
    "admin_token_file (docs/security.md#admin-authentication)"
)


def _token_required(tokens: TokenFile, sessions: ConsoleSessions) -> Middleware:
    """Every path but the probes' needs `Authorization: Bearer TOKEN`, a new one included:
    /metrics names routes, rules and traffic, /gaps the upstreams' (redacted) messages."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in OPEN_PATHS and not _signing_in(request):
            console = is_console(request.path)
            reason = (
                console_refusal(request, tokens, sessions)
                if console
                else tokens.check(request.headers.get(hdrs.AUTHORIZATION))
            )
            if reason is not None:
                ADMIN_AUTH_FAILURES.labels(reason=reason).inc()
                if console:
                    return console_refused()
                return web.json_response(
                    {"error": NEEDS_TOKEN}, status=401, headers={hdrs.WWW_AUTHENTICATE: REALM}
                )
        return await handler(request)

    return check


def _signing_in(request: web.Request) -> bool:
    """The console's sign-in form checks the token it is sent itself (and counts refusals)."""
    return request.path == LOGIN and request.method in ("GET", "POST")


def admin_tokens(path: str | None) -> TokenFile | None:
    return None if path is None else TokenFile(path, name="admin token file")


def warn_if_exposed(host: str, tokens: TokenFile | None) -> None:
    """Once, at start: an admin listener others can reach, with nothing to keep them out."""
    if tokens is None and not is_loopback(host):
        log.warning(
            "admin listener on %s without admin_token_file: anyone who can reach it can read "
            "/metrics (routes, rules, traffic), /gaps (upstream error messages) and "
            "/followups; set admin_token_file or MENDPOINT_ADMIN_TOKEN_FILE, or bind it to "
            "a loopback address (docs/security.md#admin-authentication)",
            host,
        )


PROCESS: Scope = {"scope": "process"}


def store_down(reason: str) -> Scope:
    return {
        "scope": "process",
        "store": "unreachable",
        "note": f"the fleet store does not answer ({reason}): these are this process's own "
        "figures until it returns (docs/operations.md#fleet)",
    }


def local_followups(book: FollowupBook, shared: SharedTracking | None = None) -> FollowupsSource:
    """The fleet's table while the store answers; else this process's (saying so)."""

    async def table() -> FollowupTable:
        scope = PROCESS
        if shared is not None:
            book.sweep()
            try:
                return book.settings.window_s, rank(await shared.rows()), FLEET
            except StoreDown as exc:
                scope = store_down(str(exc))
        return book.settings.window_s, book.table(), scope

    return table


def local_gaps(book: SignatureBook, shared: SharedTracking | None = None) -> GapsSource:
    async def top(limit: int, window_s: float) -> tuple[Ranked, Scope]:
        scope = PROCESS
        if shared is not None:
            try:
                return await shared.gaps(limit, window_s), FLEET
            except StoreDown as exc:
                scope = store_down(str(exc))
        return book.top(limit, window_s), scope

    return top


def local_reset(book: SignatureBook, shared: SharedTracking | None = None) -> GapsReset:
    """This process's book reset, and the fleet's table too while the store answers."""

    async def reset() -> Scope:
        book.reset()
        if shared is not None:
            try:
                await shared.reset_gaps()
            except StoreDown as exc:
                return store_down(str(exc))
            return FLEET
        return PROCESS

    return reset


FLEET: Scope = {"scope": "fleet", "store": "redis"}


async def _metrics(request: web.Request) -> web.Response:
    response = web.Response(body=request.app[METRICS]())
    response.headers["Content-Type"] = METRICS_CONTENT_TYPE
    return response


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    ready = request.app[READY_CHECK]()
    details = request.app[DETAILS]
    payload: dict[str, object] = {"status": "ready" if ready else "not ready"}
    if details is not None:
        payload.update(details())
    return web.json_response(payload, status=200 if ready else 503)


async def _gaps(request: web.Request) -> web.Response:
    """The top unmatched-error signatures with failures inside the window, most frequent
    first (`?limit=N`, default 20; `?window_s=S`, default 900, at most three hours); those a
    rule now covers listed after the others (docs/operations.md#gaps)."""
    try:
        limit = max(1, min(MAX_GAPS, int(request.query.get("limit", "20"))))
    except ValueError:
        return web.json_response({"error": "limit must be an integer"}, status=400)
    window_s = window_of(request.query.get("window_s"))
    if window_s is None:
        return web.json_response(
            {"error": f"window_s must be a number of seconds from 1 to {MAX_WINDOW_S}"},
            status=400,
        )
    top, scope = await request.app[GAPS](limit, window_s)
    rows = await gap_rows(top, request.app[RUNNING], request.app[COVERAGE])
    answer = {"window_s": window_s, "signatures": rows, **scope}
    return web.Response(
        body=json.dumps(answer, ensure_ascii=False).encode(), content_type="application/json"
    )


def window_of(text: str | None) -> int | None:
    """`?window_s=`: whole seconds from 1 to MAX_WINDOW_S (the default when absent)."""
    if text is None:
        return DEFAULT_WINDOW_S
    try:
        value = float(text)
    except ValueError:
        return None
    if not 1 <= value <= MAX_WINDOW_S:
        return None
    return round(value)


async def gap_rows(
    top: Ranked, running: Callable[[], LoadedConfig] | None, coverage: Coverage
) -> list[dict[str, object]]:
    """/gaps's rows: each signature, its count in the window, the rule that now covers it
    (`covered_by`, null while none does) and its redacted sample; covered ones last."""
    rows: list[dict[str, object]] = []
    loaded = running() if running is not None else None
    for gap in top:
        covered = None if loaded is None else await coverage.covered_by(loaded, gap)
        rows.append(
            {
                "route": gap.signature.route,
                "status": gap.signature.status,
                "signature": gap.signature.text,
                "count": gap.count,
                "covered_by": covered,
                "sample": None if gap.sample is None else gap.sample.record(),
            }
        )
    rows.sort(key=lambda row: row["covered_by"] is not None)  # stable: by count within each
    return rows


RESET_NEEDS_TOKEN = (
    "POST /gaps/reset needs the admin token: set admin_token_file "
    "(docs/security.md#admin-authentication); without one any web page could reset the counts"
)


async def _reset_gaps(request: web.Request) -> web.Response:
    """Start the gaps' counts afresh (the token was checked by the middleware)."""
    reset = request.app[GAPS_RESET]
    if request.app[TOKENS] is None:
        return web.json_response({"error": RESET_NEEDS_TOKEN}, status=403)
    if reset is None:
        return web.json_response({"error": "resetting gaps is not available here"}, status=404)
    scope = await reset()
    return web.json_response({"reset": True, **scope})


async def _followups(request: web.Request) -> web.Response:
    """What callers did after each code's failures (docs/operations.md, "Follow-ups")."""
    source = request.app[FOLLOWUPS]
    if source is None:
        return web.json_response({"error": "follow-up tracking is not available here"}, status=404)
    window_s, rows, scope = await source()
    answer = {"window_s": window_s, "codes": rows, **scope}
    return web.Response(
        body=json.dumps(answer, ensure_ascii=False).encode(),
        content_type="application/json",
    )


async def _config(request: web.Request) -> web.Response:
    """The running config: generation, when it loaded, the files watched, the last reload
    error (docs/operations.md#reload-and-shutdown). Paths and messages, never a secret."""
    source = request.app[CONFIG_STATUS]
    if source is None:
        return web.json_response({"error": "the config's status is not available here"}, status=404)
    return web.Response(
        body=json.dumps(source(), ensure_ascii=False).encode(), content_type="application/json"
    )


# --- the other side: `mendpoint gaps`, `followups` and `suggest --from HOST:PORT` -------------


class AdminError(RuntimeError):
    """An admin endpoint that could not be read; the message says why (never the token)."""


def admin_token(path: str | None) -> str | None:
    """The token to send: the first line of `path`, else of MENDPOINT_ADMIN_TOKEN_FILE's file
    (the gateway accepts every line, so a rotation can move the clients first)."""
    path = path or os.environ.get(ADMIN_TOKEN_ENV, "").strip() or None
    if path is None:
        return None
    try:
        return read_tokens(path)[0]
    except TokenError as exc:
        raise AdminError(str(exc)) from None


def admin_get(admin: str, path: str, token: str | None, method: str = "GET") -> object:
    """The JSON an admin endpoint answers, `admin` a URL or HOST:PORT (AdminError)."""
    base = admin if "://" in admin else f"http://{admin}"
    url = f"{base.rstrip('/')}{path}"
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            what = (
                "the token given is not one its admin_token_file holds"
                if token is not None
                else f"it needs the admin token: give --token-file FILE or {ADMIN_TOKEN_ENV}"
            )
            raise AdminError(f"{url} answered 401: {what}") from None
        raise AdminError(f"cannot read {url}: {_reason(exc)}") from None
    except (OSError, ValueError) as exc:
        raise AdminError(f"cannot read {url}: {exc}") from None


def _reason(error: urllib.error.HTTPError) -> str:
    """An admin endpoint's refusal, with the reason its JSON body gives."""
    try:
        said = json.loads(error.read()).get("error")
    except (ValueError, AttributeError, OSError):
        said = None
    return f"{error}: {said}" if isinstance(said, str) else str(error)
