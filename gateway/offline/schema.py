"""JSON Schemas of the files users write, generated from the models that validate them.

`mendpoint schema config|rules|fixtures` prints one; the committed copies in `docs/schema/`
are what editors read (`# yaml-language-server: $schema=…` at the top of a file gives
completion and validation as you type; docs/configuration.md#editor-support). The models
stay the only definition: a test fails when a committed copy is not what they generate.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from gateway.config.models import GatewayConfig
from gateway.config.rule_model import RulePack
from gateway.offline.fixtures import FixtureFile

DIALECT = "https://json-schema.org/draft/2020-12/schema"
KINDS: dict[str, tuple[type[BaseModel], str]] = {
    "config": (GatewayConfig, "Mendpoint gateway config (mendpoint serve --config)"),
    "rules": (RulePack, "Mendpoint rule pack (include: or builtin:NAME)"),
    "fixtures": (FixtureFile, "Mendpoint rule fixtures (mendpoint test)"),
}


def json_schema(kind: str) -> dict[str, Any]:
    """The schema of one kind of file (`config`, `rules` or `fixtures`)."""
    model, title = KINDS[kind]
    generated = model.model_json_schema(by_alias=True)
    generated.pop("title", None)
    return {"$schema": DIALECT, "title": title, **generated}


def schema_text(kind: str) -> str:
    """The schema as committed: two-space JSON and a final newline."""
    return json.dumps(json_schema(kind), indent=2, ensure_ascii=False) + "\n"


def schema_path(kind: str) -> str:
    """Where the committed copy lives, relative to the repository."""
    return f"docs/schema/{kind}.schema.json"


__all__ = ["KINDS", "json_schema", "schema_path", "schema_text"]
