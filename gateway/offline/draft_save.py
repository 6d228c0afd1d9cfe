"""A tried draft saved: the console's "Save", into the file `console.drafts_file` names
(docs/operations.md#console).

The posted rules come from a browser and were drafted from traffic: they reach the file only
as data, laid out again by `yaml_writer` (which loads its text back before returning it), so
a path or message in a rule cannot add to the file (docs/security.md#drafted-yaml). The file
is then checked as `mendpoint check` checks a config (the loader itself, with the new file in
the drafts file's place in `include:`) before it replaces the drafts file; a rule that does
not load, or an id taken, leaves the file as it was and says why, with file and line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from gateway.config.errors import ConfigError
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from gateway.config.yamlsrc import YamlDoc, read_yaml
from gateway.failure import Mode
from gateway.offline.draft_try import DraftRefused, draft_rules_data
from gateway.offline.yaml_writer import Mapping, UnsafeYaml, block, emit

HEADER = (
    "Rules saved by the Mendpoint console (console.drafts_file), each tried first on its",
    "samples, and route modes it moved one step (route_modes). The console writes this file",
    "again as data when it saves: comments are not kept.",
)


@dataclass(frozen=True, slots=True)
class Saved:
    path: str
    ids: tuple[str, ...]
    """The ids of the rules appended, in order."""


def save_draft(loaded: LoadedConfig, text: str) -> Saved:
    """Append the rules of the draft `text` to the running config's drafts file, checked
    first (DraftRefused, the file unchanged, when it is not opted in or does not load)."""
    target = loaded.drafts_file
    if target is None:
        raise DraftRefused("saving needs console.drafts_file in the config")
    posted = draft_rules_data(text)["rules"]
    assert isinstance(posted, list)
    current = _current(target)
    kept = current.get("rules") or []
    if not isinstance(kept, list):
        raise DraftRefused(f"{target}: `rules:` is not a list; fix the file first")
    _replace(loaded, target, {**current, "rules": [*kept, *posted]})
    ids = tuple(str(rule.get("id")) for rule in posted if isinstance(rule, dict))
    return Saved(target, ids)


def save_mode(loaded: LoadedConfig, route: str, mode: Mode) -> str:
    """Write `route_modes: {route: mode}` into the drafts file (checked first, as a saved
    rule is: a route unknown or a mode more than one step away is refused by the loader,
    gateway.config.route_modes); the drafts file's path."""
    target = loaded.drafts_file
    if target is None:
        raise DraftRefused("moving a mode needs console.drafts_file in the config")
    current = _current(target)
    modes = current.get("route_modes") or {}
    if not isinstance(modes, dict):
        raise DraftRefused(f"{target}: `route_modes:` is not a mapping; fix the file first")
    _replace(loaded, target, {**current, "route_modes": {**modes, route: mode.value}})
    return target


def _replace(loaded: LoadedConfig, target: str, data: dict[str, Any]) -> None:
    """`data` laid out by the safe writer, checked as `mendpoint check` would, then put in
    `target`'s place in one rename (the file unchanged when any step refuses)."""
    document = Mapping()
    for key, value in data.items():
        document.add(str(key), block(value))
    try:
        new_text = emit(document, HEADER)
    except UnsafeYaml as exc:
        raise DraftRefused(f"the draft cannot be written safely: {exc}") from None
    directory = os.path.dirname(target)
    handle, staged = tempfile.mkstemp(prefix=".mendpoint-save-", suffix=".yaml", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(new_text)
        _check(loaded.source, target, staged)
        shutil.copymode(target, staged)
        os.replace(staged, target)
    finally:
        if os.path.exists(staged):
            os.unlink(staged)


def _current(path: str) -> dict[str, Any]:
    try:
        data = read_yaml(path).data
    except ConfigError as exc:
        raise DraftRefused(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DraftRefused(f"{path} is not a rule file (a mapping); fix it first")
    return data


def _check(source: str, target: str, staged: str) -> None:
    """`mendpoint check`'s load of the config as it is on disk, `staged` in `target`'s
    place; ConfigError as DraftRefused, naming `target`."""
    try:
        doc = read_yaml(source)
        data = dict(doc.data)
        base = os.path.dirname(source) or "."
        data["include"] = [
            staged if _same(entry, target, base) else entry for entry in data.get("include", [])
        ]
        data["console"] = {**data.get("console", {}), "drafts_file": staged}
        load_config(source, YamlDoc(doc.file, data, doc.lines))
    except ConfigError as exc:
        raise DraftRefused(str(exc).replace(staged, target)) from None


def _same(entry: object, target: str, base: str) -> bool:
    if not isinstance(entry, str):
        return False
    path = entry if os.path.isabs(entry) else os.path.join(base, entry)
    return os.path.abspath(os.path.normpath(path)) == target
