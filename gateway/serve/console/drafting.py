"""The console's draft, try and save: /ui/draft and its two forms, and /ui/mode.

GET /ui/draft opens a gap's drafted rule (the Gaps page's, gateway.serve.console.views) in an
editor; POST /ui/draft/try runs the edited file on the gap's sample and on every captured
one (gateway.offline.draft_try: `explain` with the running config plus the draft, nothing
reloaded). POST /ui/draft/save and POST /ui/mode (a route's `headers` moved to `additive`,
written as `route_modes:`) write, and only when the config opts in with
`console.drafts_file` (else 404) and the admin listener has a token (else 403): the token,
or the session it signed in, was checked by the admin guard, and a foreign Origin
refused by the console's (pages.guard). Every write, and every refused write, is logged
(docs/operations.md#console, docs/security.md#console).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from gateway.config.loaded import LoadedConfig
from gateway.failure import Mode
from gateway.feedback.signatures import Gap
from gateway.offline.draft_check import explained
from gateway.offline.draft_save import save_draft, save_mode
from gateway.offline.draft_try import DraftRefused, try_draft
from gateway.offline.explain import Sample

from . import draft_html, views

log = logging.getLogger("mendpoint.console")

Reload = Callable[[], Awaitable[bool]]
"""The gateway's reload (the supervisor's: every worker's): True when it loaded."""
NOT_OPTED_IN = (
    "the console is read-only: saving needs `console.drafts_file: PATH` in the config, a "
    "rule file it lists in `include:` (docs/operations.md#console)"
)
NEEDS_TOKEN = (
    "saving needs the admin token: set admin_token_file (docs/security.md#admin-authentication)"
)
_SAVING = asyncio.Lock()
"""One save at a time: each reads the drafts file, appends and replaces it."""


def can_save(loaded: LoadedConfig, has_tokens: bool) -> str | None:
    """None when the console may write; else why not, as the page says it."""
    if loaded.drafts_file is None:
        return NOT_OPTED_IN
    if not has_tokens:
        return NEEDS_TOKEN
    return None


async def open_draft(
    loaded: LoadedConfig, top: Sequence[Gap], fields: dict[str, str]
) -> tuple[dict[str, str], list[tuple[str, Sample]], str]:
    """The gap `fields` names (route, status, signature): the fields with its draft as
    `rules` unless given, the samples to try it on (the gap's, then every capture's), and a
    note when the gap is not listed or has no draft."""
    records = await views.captured(loaded.config)
    wanted = (fields.get("route", ""), fields.get("status", ""), fields.get("signature", ""))
    gaps = await views.gaps(
        [g for g in top if (g.signature.route, g.signature.status, g.signature.text) == wanted],
        records,
        loaded,
    )
    samples: list[tuple[str, Sample]] = []
    note = ""
    if not gaps and any(wanted):
        note = "that gap is not listed now (its failures left the window, or were reset)"
    elif gaps:
        gap = gaps[0]
        if gap.sample is not None:
            samples.append(("this gap's sample", explained(gap.sample)))
        if "rules" not in fields:
            fields["rules"] = gap.draft or ""
        if gap.draft is None and gap.note:
            note = gap.note
    for record in records:
        try:
            sample = views.sample_from_capture(record)
        except ValueError:
            continue
        samples.append((f"capture {record.get('request_id', '')}", sample))
    return fields, samples, note


async def tried(loaded: LoadedConfig, text: str, samples: list[tuple[str, Sample]]) -> str:
    try:
        result = await try_draft(loaded, text, samples)
    except DraftRefused as exc:
        return draft_html.refusal(str(exc))
    return draft_html.tried(result)


async def save(loaded: LoadedConfig, text: str, reload: Reload | None, who: str) -> str:
    """The draft appended (checked first) and the gateway reloaded, as HTML to show."""
    async with _SAVING:
        try:
            done = await asyncio.get_running_loop().run_in_executor(None, save_draft, loaded, text)
        except DraftRefused as exc:
            log.warning("console: save refused (from %s): %s", who, exc)
            return draft_html.refusal(str(exc))
    log.info("console: saved rule(s) %s to %s (from %s)", ", ".join(done.ids), done.path, who)
    if reload is None:
        said = "The gateway reloads when it sees the file change."
    elif await reload():
        said = "The gateway reloaded."
    else:
        said = "The reload failed: the running config is kept (GET /config says why)."
    return draft_html.saved(done.path, done.ids, said)


async def move_mode(
    loaded: LoadedConfig, route: str, reload: Reload | None, who: str
) -> tuple[int, str]:
    """A route's mode moved one step (headers → additive), written as `route_modes:` to the
    drafts file (gateway.config.route_modes: checked by the loader first) and reloaded: the
    HTTP status and the HTML to show."""
    spec = next((r for r in loaded.config.routes if r.name == route), None)
    refused: tuple[int, str] | None = None
    if spec is None:
        refused = 404, f"no route of the running config is named {route!r}"
    elif spec.mode != Mode.HEADERS:
        refused = (
            409,
            (
                f"route {route!r} is in mode {spec.mode.value}: only headers moves (to additive) "
                "from the console"
            ),
        )
    if refused is not None:
        log.warning("console: mode change of %r refused (from %s): %s", route, who, refused[1])
        return refused[0], draft_html.refusal(refused[1])
    async with _SAVING:
        try:
            path = await asyncio.get_running_loop().run_in_executor(
                None, save_mode, loaded, route, Mode.ADDITIVE
            )
        except DraftRefused as exc:
            log.warning("console: mode change of %r refused (from %s): %s", route, who, exc)
            return 409, draft_html.refusal(str(exc))
    log.info("console: route %r moved to additive in %s (from %s)", route, path, who)
    if reload is None:
        said = "The gateway reloads when it sees the file change."
    elif await reload():
        said = "The gateway reloaded."
    else:
        said = "The reload failed: the running config is kept (GET /config says why)."
    return 200, draft_html.moved(route, path, said)


def who(request: web.Request) -> str:
    return request.remote or "unknown"
