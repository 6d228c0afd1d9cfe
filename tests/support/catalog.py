"""A small skill catalog shared by the local-resolution and end-to-end recovery tests."""

from __future__ import annotations

from gateway.config.rule_model import PolicySpec, SkillSpec
from gateway.failure import Category
from gateway.resolve.catalog import Catalog
from gateway.resolve.local import ResolveQuery


def skill(
    name: str, intents: list[str], scopes: list[str] | None = None, priority: int = 100
) -> SkillSpec:
    return SkillSpec(
        name=name,
        version="1.0.0",
        recovers=intents,
        repair="inspect",
        purpose=f"{name} repairs it",
        scopes=scopes or [],
        priority=priority,
    )


def query(
    intent: str = "format_inspection",
    scopes: frozenset[str] = frozenset(),
    category: Category = Category.VALIDATION_ERROR,
) -> ResolveQuery:
    return ResolveQuery(category, "CSV_MALFORMED", intent, scopes, "data.csv_normalize")


CATALOG = Catalog.build(
    [
        skill("schema.infer_csv_schema", ["format_inspection"], ["data:read"], priority=10),
        skill("csv.sniff", ["format_inspection"], priority=10),
        skill("csv.repair", ["format_inspection"], ["data:write"], priority=20),
        skill("access.request_grant", ["request_access"]),
        skill("token.refresh", ["credential_refresh"]),
    ],
    [
        PolicySpec.model_validate(
            {"allow": {"intent": "request_access", "skills": ["access.request_grant"]}}
        )
    ],
)
