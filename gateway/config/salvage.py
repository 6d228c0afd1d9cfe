"""What still validates in a file that fails its model, so later checks can run on it.

`mendpoint check` reports every problem of every stage at once. A typo in one rule fails the
whole config model, and without this the packs it includes would never be read nor the
whole-config checks run, so a user would fix problems one stage at a time. `salvage` rebuilds
the data with each invalid item replaced by an inert stand-in (a rule that cannot match, a
route nobody reaches, a command nobody can run) or, for any other section, dropped to its
default. It returns the model built from that and the field prefixes of the stand-ins:
problems the later stages find at a stand-in are the stand-in's own and are discarded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)
STAND_IN = "x-mendpoint-invalid"

StandIn = Callable[[int | str, Any], Any]


def _rule(at: int | str, raw: Any) -> Any:
    return {
        "id": f"{STAND_IN}-{at}",
        "match": {"status": [599], "path": f"/{STAND_IN}"},
        "error": {"code": "INVALID", "category": "UPSTREAM_ERROR"},
    }


def _route(at: int | str, raw: Any) -> Any:
    name = raw.get("name") if isinstance(raw, dict) else None
    return {
        # Keep a valid name, so rules naming this route are not blamed for its problems.
        "name": name if isinstance(name, str) and name[:1].isalnum() else f"{STAND_IN}-{at}",
        "prefix": f"/{STAND_IN}-{at}",
        "upstream": "http://127.0.0.1:9",
    }


def _skill(at: int | str, raw: Any) -> Any:
    name = raw.get("name") if isinstance(raw, dict) else None
    recovers = raw.get("recovers") if isinstance(raw, dict) else None
    valid = isinstance(recovers, list) and recovers and all(isinstance(r, str) for r in recovers)
    return {
        # Keep its name and intents, so policies allowing it are not blamed for its problems.
        "name": name if isinstance(name, str) and 0 < len(name) <= 128 else f"{STAND_IN}-{at}",
        "version": "0",
        "recovers": recovers if valid else [STAND_IN],
        "repair": "inspect",
        "purpose": STAND_IN,
    }


def _policy(at: int | str, raw: Any) -> Any:
    return {"allow": {"intent": STAND_IN, "skills": [f"{STAND_IN}-{at}"]}}


def _command(at: int | str, raw: Any) -> Any:
    return {"run": STAND_IN, "idempotent": True}


LIST_SECTIONS: dict[str, StandIn] = {
    "rules": _rule,
    "routes": _route,
    "skills": _skill,
    "policies": _policy,
}
MAP_SECTIONS: dict[str, StandIn] = {"commands": _command}


def salvage(model: type[M], data: dict[str, Any]) -> tuple[M | None, frozenset[str]]:
    """The model built from what validates, and the field prefixes of the stand-ins."""
    try:
        return model.model_validate(data), frozenset()
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    fixed = dict(data)
    inert: set[str] = set()
    for error in errors:
        loc = error["loc"]
        if not loc or not isinstance(loc[0], str):
            return None, frozenset()
        key = loc[0]
        section = fixed.get(key)
        item = loc[1] if len(loc) > 1 else None
        if key in LIST_SECTIONS and isinstance(section, list) and isinstance(item, int):
            if item < len(section):
                section = fixed[key] = list(section)
                section[item] = LIST_SECTIONS[key](item, section[item])
                inert.add(f"{key}[{item}]")
        elif key in MAP_SECTIONS and isinstance(section, dict) and isinstance(item, str):
            section = fixed[key] = dict(section)
            section[item] = MAP_SECTIONS[key](item, section.get(item))
            inert.add(f"{key}.{item}")
        elif key in LIST_SECTIONS and key in model.model_fields and _required(model, key):
            fixed[key] = [LIST_SECTIONS[key](0, None)]
            inert.add(key)
        else:
            fixed.pop(key, None)  # back to its default
    try:
        return model.model_validate(fixed), frozenset(inert)
    except ValidationError:
        return None, frozenset()


def is_inert(field: str, inert: frozenset[str] | set[str]) -> bool:
    """True when `field` (`rules[3].error.code`) lies inside one of the stand-ins."""
    for prefix in inert:
        if field == prefix or field.startswith((prefix + ".", prefix + "[")):
            return True
    return False


def _required(model: type[BaseModel], key: str) -> bool:
    return model.model_fields[key].is_required()


__all__ = ["is_inert", "salvage"]
