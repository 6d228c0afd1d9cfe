"""The console: the rollout loop in a browser, served by the admin listener at /ui.

Four pages over what the admin API and the offline tools already compute: Routes (each
route's mode and rollout, with its failures, fallbacks and upgraded share over the last
minutes, read from the gateway's own counters), Gaps (the /gaps signatures, with a captured
sample and a rule drafted by `mendpoint suggest`'s logic), Agents (the /followups outcomes as
a chart) and Try a rule (`mendpoint explain` on a pasted or captured sample). Server-rendered
HTML, a stylesheet and a small script shipped in the package: nothing is fetched from
elsewhere (docs/operations.md#console).
"""
