"""The known key nearest an unknown one: what `did you mean` names in a config error.

Every model forbids unknown keys (`model_base.Strict`), and pydantic reports one as
`extra_forbidden` at its location, `("routes", 0, "rollot")`. The keys that were possible there
are the fields of the model at the location's parent, found by walking the model's own type
annotations along it: a model's field by name or alias, a list's item, a mapping's value, and
through a union each member (pydantic puts a member's name in the location when it tried
several, `json` then `JsonMatch` or `list[JsonMatch]`). The nearest is chosen by `difflib`.
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel


def nearest_key(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The key of the model at `loc[:-1]` closest to the unknown `loc[-1]`, if one is close."""
    if not loc or not isinstance(loc[-1], str):
        return None
    places: list[Any] = [model]
    for segment in loc[:-1]:
        places = [inner for place in places for inner in _step(place, segment)]
    known = sorted({key for place in places for key in _keys(place)})
    close = difflib.get_close_matches(loc[-1], known, n=1)
    return close[0] if close else None


def _keys(place: Any) -> set[str]:
    """The keys a user may write where `place` is: a model's fields, as they are spelt."""
    keys: set[str] = set()
    for member in _members(place):
        if isinstance(member, type) and issubclass(member, BaseModel):
            keys.update(f.alias or name for name, f in member.model_fields.items())
    return keys


def _members(place: Any) -> list[Any]:
    """The types a value at `place` may be: Annotated unwrapped, a union's members, no None."""
    if get_origin(place) is Annotated:
        return _members(get_args(place)[0])
    if get_origin(place) in (Union, types.UnionType):
        return [m for arg in get_args(place) for m in _members(arg)]
    return [] if place is type(None) else [place]


def _step(place: Any, segment: int | str) -> list[Any]:
    """The types one location segment leads to from `place`."""
    members = _members(place)
    tagged = [m for m in members if _tag(m) == segment]
    if len(members) > 1 and tagged:  # pydantic named the member it tried
        return tagged
    found: list[Any] = []
    for member in members:
        origin, args = get_origin(member), get_args(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            for name, field in member.model_fields.items():
                if segment in (name, field.alias):
                    found.append(field.annotation)
        elif origin in (list, tuple, set, frozenset) and isinstance(segment, int) and args:
            found.append(args[0])
        elif origin is dict and len(args) == 2:
            found.append(args[1])
    return found


def _tag(member: Any) -> str:
    """How pydantic names a union's member in a location: `JsonMatch`, `list[JsonMatch]`."""
    origin = get_origin(member)
    if origin is None:
        return getattr(member, "__name__", repr(member))
    return f"{_tag(origin)}[{', '.join(_tag(arg) for arg in get_args(member))}]"
