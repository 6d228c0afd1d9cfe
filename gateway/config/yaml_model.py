"""Reading a file users write into a model: size and encoding checked, every problem located.

A pydantic `ValidationError` becomes `Problem`s with the file, the line of the offending key
(from the YAML source map) and the field's dotted name, so a user fixes all of them at once;
an unknown key names the known one nearest it, where one is close (`nearest_key`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.config.errors import ConfigError, Problem
from gateway.config.nearest_key import nearest_key
from gateway.config.yamlsrc import MAX_FILE_BYTES, YamlDoc, os_message, read_yaml

M = TypeVar("M", bound=BaseModel)


def validate_model(model: type[M], doc: YamlDoc) -> M:
    if not isinstance(doc.data, dict):
        raise ConfigError.single(doc.file, doc.line_of(()), "", "the top level must be a mapping")
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        raise ConfigError(_problems_from(exc, model, doc)) from None


def _problems_from(exc: ValidationError, model: type[BaseModel], doc: YamlDoc) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[int | None, str, str]] = set()
    for error in exc.errors(include_url=False):
        path = _data_path(doc.data, error["loc"], error["type"] == "missing")
        field = _field_name(path)
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = _unknown_key(model, error["loc"])
        key = (doc.line_of(path), field, message)
        if key not in seen:
            seen.add(key)
            problems.append(Problem(doc.file, doc.line_of(path), field, message))
    return problems


def _unknown_key(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    near = nearest_key(model, loc)
    if near is None:
        return "unknown key (check the spelling; see the config reference)"
    return f"unknown key: did you mean `{near}`?"


def _data_path(data: Any, loc: tuple[int | str, ...], missing: bool) -> tuple[str | int, ...]:
    """Keep the `loc` segments that exist in the data, dropping pydantic's union-member tags."""
    path: list[str | int] = []
    current = data
    for index, segment in enumerate(loc):
        present = (isinstance(current, dict) and segment in current) or (
            isinstance(current, list) and isinstance(segment, int) and segment < len(current)
        )
        if present:
            current = current[segment]
            path.append(segment)
        elif missing and index == len(loc) - 1:
            path.append(segment)
    return tuple(path)


def _field_name(path: tuple[str | int, ...]) -> str:
    out = ""
    for segment in path:
        out += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if out else segment)
    return out


__all__ = ["MAX_FILE_BYTES", "os_message", "read_yaml", "validate_model"]
