"""The console's last-hour charts as inline SVG, drawn on the server.

No chart library and nothing fetched: each chart is an `<svg>` of rectangles and one
polyline, with a `<title>` per minute for a hover and `data-` attributes a test (or a reader
of the source) can check. Colours come from the console's stylesheet by class, so the page's
Content-Security-Policy stays `style-src 'self'` (no inline style). Every label is escaped
as every other value on the console's pages (docs/security.md#console).
"""

from __future__ import annotations

from gateway.serve.console.html import esc
from gateway.serve.console.timeline import Hour, Settled
from gateway.serve.console.window import HISTORY_MINUTES, RouteFigures

WIDTH = 600
HEIGHT = 90
SLOT = WIDTH / HISTORY_MINUTES
DOT = 3
"""A minute's share upgraded: a dot of this radius, kept inside the chart at 0 % and 100 %."""
CODE_CLASSES = 6
"""Failures by code: the five most frequent codes of the hour in colours, the rest as one."""


def _ago(seconds: float) -> str:
    minutes = round(seconds / 60)
    return "now" if minutes == 0 else f"{minutes} min ago"


def _x(index: int, count: int) -> float:
    """Minutes are right-aligned: the one under way at the right edge."""
    return WIDTH - (count - index) * SLOT


def route_chart(name: str, minutes: tuple[RouteFigures, ...], hour: Hour) -> str:
    """Per minute, a bar of requests (failures stacked by code at its foot) on a shared scale,
    and the share upgraded as a line on a 0-100 % scale."""
    totals: dict[str, int] = {}
    for minute in minutes:
        for code, n in minute.failures:
            totals[code] = totals.get(code, 0) + n
    ranked = sorted(totals, key=lambda c: (-totals[c], c))
    colour = {code: f"f{min(i, CODE_CLASSES - 1)}" for i, code in enumerate(ranked)}
    top = max([1, *(m.requests for m in minutes), *(m.failed for m in minutes)])
    shapes: list[str] = []
    points: list[str] = []
    for index, minute in enumerate(minutes):
        x = _x(index, len(minutes))
        when = _ago(hour.ends_s_ago[index])
        height = HEIGHT * minute.requests / top
        shapes.append(
            f'<rect class="requests" data-minute="{index}" data-requests="{minute.requests}" '
            f'x="{x:.1f}" y="{HEIGHT - height:.1f}" width="{SLOT - 1:.1f}" height="{height:.1f}">'
            f"<title>{when}: {minute.requests} requests</title></rect>"
        )
        y = float(HEIGHT)
        for code, n in minute.failures:
            part = HEIGHT * n / top
            y -= part
            shapes.append(
                f'<rect class="{colour[code]}" data-minute="{index}" data-code="{esc(code)}" '
                f'data-count="{n}" x="{x:.1f}" y="{y:.1f}" width="{SLOT - 1:.1f}" '
                f'height="{part:.1f}"><title>{when}: {esc(code)} {n}</title></rect>'
            )
        share = minute.upgraded_share
        if share is not None:
            cx, cy = x + SLOT / 2, DOT + (HEIGHT - 2 * DOT) * (1 - share)
            points.append(f"{cx:.1f},{cy:.1f}")
            shapes.append(
                f'<circle class="share" data-minute="{index}" data-share="{share:.3f}" '
                f'cx="{cx:.1f}" cy="{cy:.1f}" r="{DOT}"><title>{when}: '
                f"{round(100 * share)} % upgraded</title></circle>"
            )
    line = (
        f'<polyline class="share" data-points="{len(points)}" points="{" ".join(points)}"/>'
        if len(points) > 1
        else ""
    )
    legend = "".join(
        f'<span class="key {colour[code]}">{esc(code)} {totals[code]}</span>' for code in ranked
    )
    label = f"{name}: requests, failures by code and share upgraded, by minute"
    return (
        f'<section class="timeline" data-route="{esc(name)}"><h2><code>{esc(name)}</code> '
        f'<span class="sub">last {len(minutes)} min, up to {top} requests a minute</span></h2>'
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" '
        f'role="img" aria-label="{esc(label)}">{line}{"".join(shapes)}</svg>'
        f'<p class="legend"><span class="key requests">requests</span>{legend}'
        '<span class="key share">share upgraded (0-100 %)</span></p></section>'
    )


def routes_charts(hour: Hour, names: list[str]) -> str:
    if not hour.ends_s_ago:
        return ""
    count = len(hour.ends_s_ago)
    empty = tuple(RouteFigures(0, (), 0, ()) for _ in range(count))
    charts = "".join(route_chart(name, hour.routes.get(name, empty), hour) for name in names)
    return f'<h2 id="last-hour">The last hour, by minute</h2>{charts}'


def recovery_chart(route: str, code: str, minutes: tuple[Settled, ...], hour: Hour) -> str:
    """Per minute with failures settled, a bar as tall as the share recovered."""
    bars: list[str] = []
    for index, minute in enumerate(minutes):
        rate = minute.rate
        if rate is None:
            continue
        x = _x(index, len(minutes))
        height = max(1.0, HEIGHT * rate)
        bars.append(
            f'<rect class="recovery" data-minute="{index}" data-settled="{minute.settled}" '
            f'data-recovered="{minute.recovered}" x="{x:.1f}" y="{HEIGHT - height:.1f}" '
            f'width="{SLOT - 1:.1f}" height="{height:.1f}"><title>'
            f"{_ago(hour.ends_s_ago[index])}: {minute.recovered} of {minute.settled} "
            "recovered</title></rect>"
        )
    settled = sum(m.settled for m in minutes)
    recovered = sum(m.recovered for m in minutes)
    return (
        f'<section class="recovery-rate" data-route="{esc(route)}" data-code="{esc(code)}">'
        f"<h2><code>{esc(route)}</code> {esc(code)} "
        f'<span class="sub">{recovered} of {settled} recovered</span></h2>'
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" '
        f'role="img" aria-label="{esc(f"{route} {code}: recovery rate by minute")}">'
        f"{''.join(bars)}</svg></section>"
    )


def recovery_charts(hour: Hour) -> str:
    if not hour.codes:
        return ""
    charts = "".join(
        recovery_chart(route, code, minutes, hour)
        for (route, code), minutes in sorted(hour.codes.items())
    )
    return (
        '<h2 id="last-hour">Recovery rate per code, the last hour by minute</h2>'
        '<p class="note">The share of the failures settled in each minute whose advice worked '
        "(recovered, or retried as advised): 100 % at the top.</p>" + charts
    )
