"""`route_modes:` of an included file: a route's mode moved one step, outside the main file.

The console's drafts file (`console.drafts_file`) is the only file the console writes, and an
included file holds rules, never routes; so moving a route from `headers` to `additive` from
the console (docs/retrofit.md) is written there as `route_modes: {ROUTE: MODE}`, applied after
the main file's routes are read. It is refused at load, with file, line and field, when the
route is not one of the main file's, when two files move the same route, or when the mode is
not the route's own or the next one along original → headers → additive → envelope: a file
the console writes can take a route one step further, never jump to `envelope` from `headers`
nor quietly step back after the main file moved on (docs/configuration.md#route-modes).
"""

from __future__ import annotations

from gateway.config.errors import Problem
from gateway.config.models import GatewayConfig
from gateway.config.rule_model import RulePack
from gateway.config.yamlsrc import YamlDoc
from gateway.failure import Mode

LADDER = (Mode.ORIGINAL, Mode.HEADERS, Mode.ADDITIVE, Mode.ENVELOPE)
"""The modes from least to most invasive: a step is one place to the right."""


def next_mode(mode: Mode) -> Mode | None:
    """The mode one step further than `mode`, None past `envelope`."""
    index = LADDER.index(mode)
    return LADDER[index + 1] if index + 1 < len(LADDER) else None


def apply_route_modes(
    config: GatewayConfig, packs: list[tuple[RulePack, YamlDoc]]
) -> tuple[GatewayConfig, list[Problem]]:
    """`config` with the routes the included `packs` move set to their new mode, and what is
    wrong with those moves (the config unchanged for a move that is refused)."""
    problems: list[Problem] = []
    moved: dict[str, tuple[Mode, str]] = {}
    by_name = {route.name: route for route in config.routes}
    for pack, doc in packs:
        for name, mode in pack.route_modes.items():
            line = doc.line_of(("route_modes", name))
            field = f"route_modes.{name}"
            route = by_name.get(name)
            if route is None:
                known = ", ".join(sorted(by_name)) or "none"
                message = f"no route of the main config is named {name!r} (routes: {known})"
                problems.append(Problem(doc.file, line, field, message))
                continue
            if name in moved:
                message = f"route {name!r} is already moved by {moved[name][1]}"
                problems.append(Problem(doc.file, line, field, message))
                continue
            if mode not in (route.mode, next_mode(route.mode)):
                step = next_mode(route.mode)
                allowed = f"{route.mode.value} or {step.value}" if step else route.mode.value
                message = (
                    f"route {name!r} is in mode {route.mode.value} in the main config: an "
                    f"included file moves it one step at most ({allowed}), not to {mode.value}"
                )
                problems.append(Problem(doc.file, line, field, message))
                continue
            moved[name] = (mode, f"{doc.file}:{line}" if line is not None else doc.file)
    if not moved:
        return config, problems
    routes = [
        route.model_copy(update={"mode": moved[route.name][0]}) if route.name in moved else route
        for route in config.routes
    ]
    return config.model_copy(update={"routes": routes}), problems
