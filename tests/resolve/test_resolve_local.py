"""Local resolution: declared intents only, caller scopes, policy deny-by-default, order, caps."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from gateway.config.models import CallersSpec
from gateway.config.rule_model import SkillSpec
from gateway.failure import NO_RECOVERY, Category
from gateway.resolve.callers import ANONYMOUS, CallerDirectory, key_digest
from gateway.resolve.catalog import Catalog
from gateway.resolve.local import resolve_locally
from tests.support.catalog import CATALOG, query, skill


def test_options_ordered_by_priority_then_name_and_ranked() -> None:
    result = resolve_locally(CATALOG, query(scopes=frozenset({"data:read", "data:write"})), 3)
    assert [(o.rank, o.skill_name) for o in result.options] == [
        (1, "csv.sniff"),
        (2, "schema.infer_csv_schema"),
        (3, "csv.repair"),
    ]
    assert all(o.then_retry == "data.csv_normalize" for o in result.options)
    assert result.options[0].to_json()["then_retry"] == {
        "skill_name": "data.csv_normalize",
        "advisory": True,
    }


def test_scopes_filter_and_operator_reasons() -> None:
    result = resolve_locally(CATALOG, query(), 3)
    assert [o.skill_name for o in result.options] == ["csv.sniff"]
    assert dict(result.filtered) == {
        "schema.infer_csv_schema": "caller lacks scope(s) ['data:read']",
        "csv.repair": "caller lacks scope(s) ['data:write']",
    }


def test_cap_on_options() -> None:
    result = resolve_locally(CATALOG, query(scopes=frozenset({"data:read", "data:write"})), 1)
    assert [o.skill_name for o in result.options] == ["csv.sniff"]


def test_undeclared_intent_gets_nothing() -> None:
    assert resolve_locally(CATALOG, query("json_repair"), 3).options == ()
    assert not CATALOG.declares("json_repair")


@pytest.mark.parametrize(
    "category", [Category.POLICY_DENIED, Category.PERMISSION_DENIED], ids=["policy", "permission"]
)
def test_denials_are_deny_by_default(category: Category) -> None:
    denied = resolve_locally(CATALOG, query("credential_refresh", category=category), 3)
    allowed = resolve_locally(CATALOG, query("request_access", category=category), 3)
    assert denied.options == ()
    assert "no policy allows" in dict(denied.filtered)["token.refresh"]
    assert [o.skill_name for o in allowed.options] == ["access.request_grant"]


def test_catalog_version_is_a_content_hash() -> None:
    same = Catalog.build([skill("b", ["x"]), skill("a", ["y"])], [])
    reordered = Catalog.build([skill("a", ["y"]), skill("b", ["x"])], [])
    changed = Catalog.build([skill("a", ["y"]), skill("b", ["x", "z"])], [])
    assert same.version == reordered.version
    assert same.version != changed.version
    assert same.version.startswith("sha256:")


def test_no_recovery_block_is_exact() -> None:
    assert NO_RECOVERY.to_json() == {"available": False, "options": []}


def test_api_key_callers_are_matched_by_hash_only() -> None:
    spec = CallersSpec.model_validate(
        {
            "header": "X-Api-Key",
            "keys": [
                {
                    "name": "agent-a",
                    "key": "sha256:" + hashlib.sha256(b"k-a").hexdigest(),
                    "scopes": ["data:read"],
                }
            ],
        }
    )
    directory = CallerDirectory.build(spec)
    assert directory.identify(CIMultiDict({"X-Api-Key": "k-a"})).scopes == frozenset({"data:read"})
    assert directory.identify(CIMultiDict({"X-Api-Key": "k-b"})) is ANONYMOUS
    assert directory.identify(CIMultiDict()) is ANONYMOUS
    assert "k-a" not in repr(directory)
    assert key_digest("k-a") == hashlib.sha256(b"k-a").hexdigest()


def test_trusted_header_callers() -> None:
    spec = CallersSpec.model_validate(
        {
            "source": "trusted_header",
            "header": "X-Caller",
            "scopes_header": "X-Caller-Scopes",
            "principals": [{"name": "svc-a", "scopes": ["data:read"]}],
        }
    )
    directory = CallerDirectory.build(spec)
    sent = CIMultiDict({"X-Caller": "svc-a", "X-Caller-Scopes": "data:write, x"})
    caller = directory.identify(sent, peer="10.0.0.5", trusted=True)
    assert caller.name == "svc-a"
    assert caller.scopes == frozenset({"data:read", "data:write", "x"})
    stranger = directory.identify(
        CIMultiDict({"X-Caller": "stranger"}), peer="10.0.0.5", trusted=True
    )
    assert stranger.scopes == frozenset()
    # The same headers from a peer outside trusted_proxies name nobody.
    assert directory.identify(sent, peer="10.9.9.9", trusted=False) is ANONYMOUS


INTENTS = st.sampled_from(["a", "b", "c"])
SCOPES = st.sampled_from(["s1", "s2", "s3"])
SKILLS = st.lists(
    st.builds(
        lambda name, intents, scopes, priority: skill(name, intents, scopes, priority),
        st.text("abcdef.", min_size=1, max_size=6),
        st.lists(INTENTS, min_size=1, max_size=3, unique=True),
        st.lists(SCOPES, max_size=3, unique=True),
        st.integers(0, 5),
    ),
    max_size=12,
    unique_by=lambda s: s.name,
)


@settings(max_examples=150, deadline=None)
@given(
    skills=SKILLS,
    intent=INTENTS,
    scopes=st.frozensets(SCOPES),
    cap=st.integers(0, 5),
    category=st.sampled_from(list(Category)),
)
def test_resolution_is_deterministic_declared_and_in_scope(
    skills: list[SkillSpec], intent: str, scopes: frozenset[str], cap: int, category: Category
) -> None:
    catalog = Catalog.build(skills, [])
    reversed_catalog = Catalog.build(list(reversed(skills)), [])
    assert catalog.version == reversed_catalog.version
    q = query(intent, scopes, category)
    first = resolve_locally(catalog, q, cap)
    assert first.options == resolve_locally(reversed_catalog, q, cap).options
    by_name = {s.name: s for s in skills}
    assert len(first.options) <= cap
    assert [o.rank for o in first.options] == list(range(1, len(first.options) + 1))
    keys = [(by_name[o.skill_name].priority, o.skill_name) for o in first.options]
    assert keys == sorted(keys)
    for option in first.options:
        declared = by_name[option.skill_name]
        assert intent in declared.recovers
        assert set(declared.scopes) <= scopes
        assert option.then_retry == q.operation
    if category in (Category.POLICY_DENIED, Category.PERMISSION_DENIED):
        assert first.options == ()
