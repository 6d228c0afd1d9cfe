"""The console's pages as HTML text.

Everything an upstream or a caller wrote (messages, bodies, paths, headers, rule ids from a
config) reaches the page only through `esc`, in text and in attribute values alike, and the
pages carry a Content-Security-Policy that runs no inline script, so a captured body holding
`<script>` is shown as the characters it is (docs/security.md#console).
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from http import HTTPStatus
from urllib.parse import urlencode

from gateway.classify.why_not import PassedOver
from gateway.failure import Mode, TransportKind
from gateway.offline.explain import Answer, Explanation

from .views import AgentRow, Gap, RouteRow
from .window import Recent

PAGES = (("routes", "Routes"), ("gaps", "Gaps"), ("agents", "Agents"), ("try", "Try a rule"))
CHART_WIDTH = 1000
NONE = "&#8211;"  # an en dash: nothing counted


def _draft_link(route: str, status: str, signature: str) -> str:
    query = urlencode({"route": route, "status": status, "signature": signature})
    return f"/ui/draft?{query}"


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def page(current: str, title: str, body: str, *, refresh_s: int | None = None) -> str:
    nav = "".join(
        f'<a href="/ui/{name}"{" aria-current=page" if name == current else ""}>{esc(label)}</a>'
        for name, label in PAGES
    )
    refresh = f' data-refresh="{refresh_s}"' if refresh_s else ""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Mendpoint · {esc(title)}</title>"
        '<link rel="stylesheet" href="/ui/static/console.css">'
        '<link rel="icon" href="/ui/static/favicon.svg">'
        '<script src="/ui/static/console.js" defer></script></head>'
        f'<body{refresh}><header><span class="brand">Mendpoint</span><nav>{nav}</nav></header>'
        f'<main id="main"><h1>{esc(title)}</h1>{body}</main></body></html>\n'
    )


def login(message: str | None) -> str:
    note = f'<p class="error" role="alert">{esc(message)}</p>' if message else ""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>Mendpoint · sign in</title>"
        '<link rel="stylesheet" href="/ui/static/console.css"></head>'
        '<body><main id="main" class="narrow"><h1>Mendpoint console</h1>'
        "<p>This admin listener needs a token of its <code>admin_token_file</code>.</p>"
        f"{note}"
        '<form method="post" action="/ui/login">'
        '<label>Admin token <input type="password" name="token" autocomplete="off" '
        "required autofocus></label> <button>Sign in</button></form></main></body></html>\n"
    )


# --- Routes -----------------------------------------------------------------------------------


def routes(rows: list[RouteRow], recent: Recent, movable: bool = False) -> str:
    """`movable`: the config opts in to console writes (console.drafts_file and an admin
    token), so a `headers` route shows a button moving it to `additive` (POST /ui/mode)."""
    span = _span(recent.span_s)
    head = (
        "<tr><th>route</th><th>type</th><th>prefix</th><th>mode</th><th>rollout</th>"
        "<th class=num>requests</th><th>failures by code</th><th class=num>upgraded</th>"
        "<th>fallbacks</th></tr>"
    )
    body = []
    for row in rows:
        figures = row.figures
        failures = ", ".join(f"{esc(code)} {n}" for code, n in figures.failures) or NONE
        fallbacks = ", ".join(f"{esc(why)} {n}" for why, n in figures.fallbacks) or NONE
        share = figures.upgraded_share
        upgraded = NONE if share is None else f"{round(100 * share)} %"
        body.append(
            f'<tr data-route="{esc(row.name)}"><td><strong>{esc(row.name)}</strong>'
            f'<div class="sub">{esc(row.upstream)}</div></td>'
            f"<td>{esc(row.type)}</td><td><code>{esc(row.prefix)}</code></td>"
            f'<td><span class="mode mode-{esc(row.mode)}">{esc(row.mode)}</span>'
            f"{_move_button(row) if movable else ''}</td>"
            f"<td>{esc(row.rollout)}</td><td class=num>{figures.requests}</td>"
            f'<td class="failures">{failures}</td><td class="num upgraded">{upgraded}</td>'
            f'<td class="fallbacks">{fallbacks}</td></tr>'
        )
    return (
        f'<p class="lead">Counts over {span}, read from the gateway\'s counters every 10 s. '
        "Upgraded: the share of classified failures answered with the advice in the body "
        "(<code>additive</code> or <code>envelope</code>); shadow mode, a rollout below 100 % "
        "and bodies too large to rewrite lower it. Fallbacks: failures sent as the upstream's "
        "answer because enrichment failed, ran over budget or the body was too large.</p>"
        f'<table class="grid" id="routes"><thead>{head}</thead><tbody>{"".join(body)}</tbody>'
        "</table>"
    )


def _move_button(row: RouteRow) -> str:
    if row.mode != "headers":
        return ""
    return (
        '<form method="post" action="/ui/mode" class="move-mode">'
        f'<input type="hidden" name="route" value="{esc(row.name)}">'
        '<button type="submit" title="written to console.drafts_file as route_modes:, then '
        'reloaded">to additive</button></form>'
    )


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"the last {max(1, round(seconds))} s"
    return f"the last {round(seconds / 60)} min"


def scope(found: dict[str, object]) -> str:
    """Whose figures a page shows, as /gaps and /followups say (the fleet, the workers, or
    this process alone, with why while a configured store is down)."""
    parts = [f"{esc(k)}: {esc(v)}" for k, v in found.items()]
    return f'<p class="note scope">figures of {"; ".join(parts)}</p>' if parts else ""


# --- Gaps -------------------------------------------------------------------------------------


def gaps(found: list[Gap]) -> str:
    if not found:
        return (
            '<p class="lead">No unmatched failures yet: every failure so far was named by a '
            "rule of yours, or none happened.</p>"
        )
    items = []
    for index, gap in enumerate(found):
        sample = ""
        if gap.sample is not None:
            s = gap.sample
            sample = (
                "<details open><summary>captured sample (redacted)</summary>"
                f'<pre class="sample">{esc(s.method)} {esc(s.path)} → {s.status} '
                f"{esc(s.content_type)}\n\n{esc(s.body)}</pre></details>"
            )
        draft = ""
        if gap.draft is not None:
            draft = (
                f'<div class="draft"><div class="bar"><span>drafted rule</span>'
                f'<button type="button" data-copy="draft-{index}">Copy YAML</button></div>'
                f'<pre id="draft-{index}" class="yaml">{esc(gap.draft)}</pre></div>'
            )
        note = f'<p class="note">{esc(gap.note)}</p>' if gap.note else ""
        if gap.draft is not None:
            link = esc(_draft_link(gap.route, gap.status, gap.signature))
            note += f'<p><a class="edit" href="{link}">Edit and try</a></p>'
        items.append(
            f'<section class="gap" data-route="{esc(gap.route)}" data-status="{esc(gap.status)}">'
            f'<h2><span class="count">{gap.count}</span> <code>{esc(gap.route)}</code> '
            f'<span class="status">{esc(gap.status)}</span> '
            f'<span class="signature">{esc(gap.signature)}</span></h2>'
            f"{sample}{draft}{note}</section>"
        )
    return (
        '<p class="lead">Failures only a shipped default rule classified, by signature (route, '
        "status, message with its variable parts masked), most frequent first. Each draft is "
        "what <code>mendpoint suggest</code> writes: review its <code>review:</code> lines, "
        "include it, and run <code>mendpoint test</code>.</p>" + "".join(items)
    )


# --- Agents -----------------------------------------------------------------------------------


def agents(
    rows: list[AgentRow], window_s: float | None, readings: dict[tuple[str, str], str]
) -> str:
    if window_s is None:
        return '<p class="lead">Follow-up tracking is not available here.</p>'
    legend = "".join(
        f'<span class="key o-{esc(outcome.value)}">{esc(label)}</span>'
        for outcome, label, _ in (rows[0].outcomes if rows else ())
    )
    charts = []
    for row in rows:
        total = max(1, sum(n for _, _, n in row.outcomes))
        x = 0.0
        rects = []
        for outcome, label, count in row.outcomes:
            if count == 0:
                continue
            width = CHART_WIDTH * count / total
            rects.append(
                f'<rect class="o-{esc(outcome.value)}" data-outcome="{esc(outcome.value)}" '
                f'data-count="{count}" x="{x:.1f}" y="0" width="{width:.1f}" height="28">'
                f"<title>{esc(label)}: {count}</title></rect>"
            )
            x += width
        counts = " · ".join(f"{esc(label)} {n}" for _, label, n in row.outcomes if n)
        reading = readings.get((row.route, row.code), "")
        charts.append(
            f'<section class="agent" data-route="{esc(row.route)}" data-code="{esc(row.code)}">'
            f"<h2><code>{esc(row.route)}</code> {esc(row.code)} "
            f'<span class="sub">{row.failures} failures, rule {esc(row.rule)}</span></h2>'
            f'<svg viewBox="0 0 {CHART_WIDTH} 28" preserveAspectRatio="none" role="img" '
            f'aria-label="{esc(counts)}">{"".join(rects)}</svg>'
            f'<p class="counts">{counts}</p><p class="note">{esc(reading)}</p></section>'
        )
    if not charts:
        charts.append('<p class="lead">No failure has been followed yet.</p>')
    return (
        f'<p class="lead">What each caller did next after a failure, per route and code, within '
        f"{window_s:g} s; the codes whose advice is not acted on or does not work first.</p>"
        f'<p class="legend">{legend}</p>' + "".join(charts)
    )


# --- Try a rule -------------------------------------------------------------------------------


def try_form(
    routes: list[tuple[str, str]],
    fields: dict[str, str],
    choices: list[tuple[str, str]],
    result: str,
) -> str:
    """The sample form, filled with `fields`, and the result below it."""

    def value(name: str, default: str = "") -> str:
        return esc(fields.get(name, default))

    route_options = "".join(
        f'<option value="{esc(name)}" data-prefix="{esc(prefix)}"'
        f"{_selected(fields.get('route') == name)}>{esc(name)} ({esc(prefix)})</option>"
        for name, prefix in routes
    )
    modes = "".join(
        f'<option value="{esc(m.value)}"{_selected(fields.get("mode", "envelope") == m.value)}>'
        f"{esc(m.value)}</option>"
        for m in Mode
    )
    faults = '<option value="">(a status)</option>' + "".join(
        f'<option value="{esc(k.value)}"{_selected(fields.get("transport") == k.value)}>'
        f"{esc(k.value)}</option>"
        for k in TransportKind
    )
    picker = ""
    if choices:
        options = "".join(
            f'<option value="{esc(rid)}"{_selected(fields.get("sample") == rid)}>'
            f"{esc(line)}</option>"
            for rid, line in choices
        )
        picker = (
            '<form method="get" action="/ui/try" class="picker"><label>Captured sample '
            f'<select name="sample">{options}</select></label> <button>Load</button></form>'
        )
    return (
        '<p class="lead">A sample upstream answer, evaluated by <code>mendpoint explain</code>\'s '
        "own logic against the running config: the rule that matches, what the caller would "
        "get, and why the other rules did not match.</p>"
        f"{picker}"
        '<form method="post" action="/ui/try" id="try" class="sample-form">'
        f'<label>Route <select name="route" id="route">{route_options}</select></label>'
        f'<label>Mode <select name="mode">{modes}</select></label>'
        f'<label>Method <input name="method" value="{value("method", "GET")}" size="7"></label>'
        f'<label class="wide">Path <input name="path" id="path" value="{value("path", "/")}">'
        "</label>"
        f'<label>Status <input name="status" type="number" min="100" max="599" '
        f'value="{value("status")}"></label>'
        f'<label>or transport fault <select name="transport">{faults}</select></label>'
        '<label class="full"><span>Response headers, one <code>Name: value</code> a line</span>'
        f'<textarea name="headers" rows="3">\n{value("headers")}</textarea></label>'
        '<label class="full"><span>Request headers (e.g. <code>Idempotency-Key: k1</code>)</span>'
        f'<textarea name="request_headers" rows="2">\n{value("request_headers")}</textarea></label>'
        f'<label class="full">Body<textarea name="body" rows="8">\n{value("body")}</textarea>'
        '</label><p><button id="explain">Explain</button></p></form>'
        f'<div id="result">{result}</div>'
    )


def _selected(chosen: bool) -> str:
    return " selected" if chosen else ""


def try_error(message: str) -> str:
    return f'<p class="error" role="alert">{esc(message)}</p>'


def try_result(result: Explanation, text: str) -> str:
    verdict = result.verdict
    matched = (
        "<p>No rule matched: the upstream's answer would pass through.</p>"
        if verdict is None
        else f'<p>Matched <strong id="matched">{esc(verdict.rule.id)}</strong> '
        f"({esc(verdict.rule.origin)}{', a shipped default' if verdict.rule.is_default else ''})"
        "</p>"
    )
    return (
        f"<h2>Result</h2>{matched}"
        '<div class="bar"><span><code>mendpoint explain</code> prints</span>'
        '<button type="button" data-copy="explain-text">Copy</button></div>'
        f'<pre id="explain-text">{esc(text)}</pre>'
        "<h2>The answer the caller gets</h2>"
        f'<pre id="answer">{esc(wire(result.answer))}</pre>'
        f"{_others(result.passed_over, result.not_candidates)}"
    )


def wire(answer: Answer) -> str:
    try:
        reason = HTTPStatus(answer.status).phrase
    except ValueError:
        reason = ""
    lines = [f"HTTP/1.1 {answer.status} {reason}".rstrip()]
    lines += [f"{name}: {value}" for name, value in answer.headers.items()]
    return "\n".join(lines) + "\n\n" + answer.body.decode("utf-8", "replace")


def _others(passed: Iterable[PassedOver], untried: int) -> str:
    rows = "".join(
        f'<tr><td><code>{esc(p.rule)}</code><div class="sub">{esc(p.origin)}</div></td>'
        f"<td>{'<br>'.join(esc(r) for r in p.reasons)}</td></tr>"
        for p in passed
    )
    table = (
        '<table class="grid" id="others"><thead><tr><th>rule</th><th>why not</th></tr>'
        f"</thead><tbody>{rows}</tbody></table>"
        if rows
        else "<p>No other rule was a candidate.</p>"
    )
    return (
        f"<h2>The other rules</h2>{table}"
        f'<p class="note">{untried} more rules were never tried: they are written for other '
        "statuses, transport faults, MCP failures or path prefixes.</p>"
    )
