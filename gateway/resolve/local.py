"""In-process resolution against a `Catalog`: pure, synchronous and deterministic.

Returns the options and, for operators only (`mendpoint explain`), why each declared skill
was left out. The caller-facing block never says why: an empty result is always the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.failure import Category, RecoveryOption
from gateway.resolve.catalog import Catalog, Skill

# Failures where offering a skill could hand the caller a way around a denial.
DENIAL_CATEGORIES = frozenset({Category.POLICY_DENIED, Category.PERMISSION_DENIED})


@dataclass(frozen=True, slots=True)
class ResolveQuery:
    """Everything resolution may depend on; nothing else (no keys, no request data)."""

    category: Category
    code: str
    intent: str
    scopes: frozenset[str]
    operation: str


@dataclass(frozen=True, slots=True)
class Resolution:
    options: tuple[RecoveryOption, ...]
    filtered: tuple[tuple[str, str], ...] = ()


def resolve_locally(catalog: Catalog, query: ResolveQuery, max_options: int) -> Resolution:
    offered: list[Skill] = []
    filtered: list[tuple[str, str]] = []
    for skill in catalog.by_intent.get(query.intent, ()):
        reason = _exclusion(catalog, skill, query)
        if reason is not None:
            filtered.append((skill.name, reason))
        elif len(offered) < max_options:
            offered.append(skill)
        else:
            filtered.append((skill.name, f"beyond max_options ({max_options})"))
    options = tuple(
        RecoveryOption(rank, s.name, s.version, s.purpose, query.operation)
        for rank, s in enumerate(offered, start=1)
    )
    return Resolution(options, tuple(filtered))


def _exclusion(catalog: Catalog, skill: Skill, query: ResolveQuery) -> str | None:
    missing = skill.scopes - query.scopes
    if missing:
        return f"caller lacks scope(s) {sorted(missing)}"
    if query.category in DENIAL_CATEGORIES and (query.intent, skill.name) not in catalog.allowed:
        return f"{query.category.value}: no policy allows intent {query.intent!r} for this skill"
    return None
