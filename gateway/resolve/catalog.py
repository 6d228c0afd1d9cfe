"""The skill catalog: skills indexed by the repair intents they declare, plus policy allows.

Built once per config. Its `version` is a content hash, so two gateways loaded from the same
files agree on it and cached resolutions are invalidated whenever the catalog changes.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass

from gateway.config.rule_model import PolicySpec, SkillSpec


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    version: str
    recovers: frozenset[str]
    repair: str
    purpose: str
    scopes: frozenset[str]
    priority: int

    @classmethod
    def from_spec(cls, spec: SkillSpec) -> Skill:
        return cls(
            spec.name,
            spec.version,
            frozenset(spec.recovers),
            spec.repair,
            spec.purpose,
            frozenset(spec.scopes),
            spec.priority,
        )


@dataclass(frozen=True, slots=True)
class Catalog:
    """Skills by intent in resolution order (priority, then name), and the policy allow-set."""

    version: str
    by_intent: dict[str, tuple[Skill, ...]]
    allowed: frozenset[tuple[str, str]]

    @classmethod
    def build(cls, skills: list[SkillSpec], policies: list[PolicySpec]) -> Catalog:
        by_intent: dict[str, list[Skill]] = defaultdict(list)
        for spec in skills:
            skill = Skill.from_spec(spec)
            for intent in skill.recovers:
                by_intent[intent].append(skill)
        ordered = {
            intent: tuple(sorted(found, key=lambda s: (s.priority, s.name)))
            for intent, found in by_intent.items()
        }
        allowed = frozenset(
            (policy.allow.intent, name) for policy in policies for name in policy.allow.skills
        )
        return cls(_version(skills, policies), ordered, allowed)

    def declares(self, intent: str) -> bool:
        """True when some skill in the whole catalog declares `intent` (else: a catalog gap)."""
        return intent in self.by_intent

    def lacks(self, intent: str) -> bool:
        """A catalog gap: skills are configured, but none declares `intent`. With no catalog
        at all nothing is missing, so a gateway without skills reports no gaps."""
        return bool(self.by_intent) and intent not in self.by_intent


def _version(skills: list[SkillSpec], policies: list[PolicySpec]) -> str:
    canonical = json.dumps(
        {
            "skills": sorted(
                (s.model_dump(mode="json") for s in skills),
                key=lambda d: json.dumps(d, sort_keys=True),
            ),
            "policies": sorted(
                (p.model_dump(mode="json") for p in policies),
                key=lambda d: json.dumps(d, sort_keys=True),
            ),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
