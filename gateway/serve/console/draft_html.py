"""The console's draft page as HTML text: a gap's drafted rule in an editor, what "Try" found
for each sample, and what "Save" did. Everything from traffic or the config goes through
`esc`, as on every console page (docs/security.md#console).
"""

from __future__ import annotations

from gateway.offline.draft_try import TriedSample, TryResult

from .html import esc, wire

DRAFT = "/ui/draft"


def draft_form(fields: dict[str, str], can_save: str | None, result: str) -> str:
    """The editor, filled with `fields`; `can_save`: None when "Save" is offered, else why
    it is not."""
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{esc(fields.get(name, ""))}">'
        for name in ("route", "status", "signature")
    )
    save = (
        f'<button id="save" formaction="{DRAFT}/save">Save and reload</button>'
        if can_save is None
        else f'<span class="note" id="read-only">{esc(can_save)}</span>'
    )
    gap = ""
    if fields.get("route"):
        gap = (
            f'<p class="sub">Gap: <code>{esc(fields.get("route", ""))}</code> '
            f"{esc(fields.get('status', ''))} {esc(fields.get('signature', ''))}</p>"
        )
    return (
        '<p class="lead">A drafted rule file, as <code>mendpoint suggest</code> writes it. '
        "Edit it, then <strong>Try</strong> runs it with the running config (nothing is "
        "reloaded) on this gap's sample and on every captured sample: which it now matches, "
        "which it takes from another rule, and the answer the caller would get.</p>"
        f"{gap}"
        f'<form method="post" action="{DRAFT}/try" id="draft" class="sample-form">{hidden}'
        '<label class="full">Rules (YAML)'
        f'<textarea name="rules" id="rules" rows="18" spellcheck="false">\n'
        f"{esc(fields.get('rules', ''))}</textarea></label>"
        f'<p><button id="try">Try</button> {save}</p></form>'
        f'<div id="result">{result}</div>'
    )


def tried(result: TryResult) -> str:
    """One row a sample: its rule before and with the draft, and the caller's answer."""
    if not result.samples:
        return "<p>No sample to try it on: capture is off, and the gap keeps none.</p>"
    rows = []
    for index, sample in enumerate(result.samples):
        rows.append(_row(index, sample, result.ids))
    matched, taken = len(result.matched), len(result.taken)
    return (
        f'<h2>Tried</h2><p id="summary">Rules {esc(", ".join(result.ids))}: '
        f'<strong id="matched-count">{matched}</strong> of {len(result.samples)} samples '
        f'matched, <strong id="taken-count">{taken}</strong> taken from another rule.</p>'
        '<table class="grid" id="tried"><thead><tr><th>sample</th><th>request</th>'
        "<th>before</th><th>with the draft</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _row(index: int, sample: TriedSample, ids: tuple[str, ...]) -> str:
    s = sample.sample
    what = f"{s.method} {s.path} → {s.status if s.status is not None else s.transport}"
    if sample.error is not None:
        return (
            f'<tr class="error"><td>{esc(sample.label)}</td><td>{esc(what)}</td>'
            f'<td colspan="2">{esc(sample.error)}</td></tr>'
        )
    state = sample.state(ids)
    answer = ""
    if sample.answer is not None:
        answer = (
            f"<details{' open' if index == 0 else ''}><summary>the answer the caller gets"
            f'</summary><pre class="answer">{esc(wire(sample.answer))}</pre></details>'
        )
    return (
        f'<tr class="{state}" data-state="{state}"><td>{esc(sample.label)}</td>'
        f"<td>{esc(what)}</td><td><code>{esc(sample.before or 'no rule')}</code></td>"
        f'<td><code class="after">{esc(sample.after or "no rule")}</code>{answer}</td></tr>'
    )


def saved(path: str, ids: tuple[str, ...], reloaded: str) -> str:
    return (
        f'<p class="ok" id="saved" role="status">Saved {esc(", ".join(ids))} to '
        f"<code>{esc(path)}</code>. {esc(reloaded)}</p>"
    )


def moved(route: str, path: str, reloaded: str) -> str:
    return (
        f'<p class="ok" id="moved" role="status">Route <code>{esc(route)}</code> moved to '
        f"<code>additive</code> in <code>{esc(path)}</code> (<code>route_modes:</code>). "
        f"{esc(reloaded)}</p>"
    )


def refusal(message: str) -> str:
    return f'<p class="error" role="alert">{esc(message)}</p>'
