"""The console: the rollout loop in a browser, served by the admin listener at /ui.

Four pages over what the admin API and the offline tools already compute: Routes (each
route's mode and rollout, with its failures, fallbacks and upgraded share over the last
minutes, read from the gateway's own counters, and the last hour charted by minute), Gaps
(the /gaps signatures, with a captured sample and a rule drafted by `mendpoint suggest`'s
logic, which /ui/draft edits, tries on the captures and, with `console.drafts_file`, saves),
Agents (the /followups outcomes as a chart, and the recovery rate per code by minute) and
Try a rule (`mendpoint explain` on a pasted or captured sample). Server-rendered
HTML, a stylesheet and a small script shipped in the package: nothing is fetched from
elsewhere (docs/operations.md#console).
"""
