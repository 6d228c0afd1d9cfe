"""Every shipped rule pack loads, and its fixture cases classify as they say."""

from __future__ import annotations

import pytest

from gateway.classify import Classifier
from gateway.config.loader import (
    SHAPE_PACKS,
    builtin_names,
    builtin_text,
    embedded_config,
    load_config,
)
from gateway.config.rule_model import RulePack
from gateway.config.yamlsrc import parse_yaml
from gateway.offline.fixtures import load_fixtures, run_fixtures
from tests.support.paths import EXAMPLES

PACKS = builtin_names()


def test_every_pack_has_fixtures() -> None:
    assert PACKS, "no shipped packs found"
    for name in PACKS:
        text = builtin_text(f"fixtures/{name}")
        assert load_fixtures(text, name).cases


@pytest.mark.parametrize("name", PACKS)
def test_pack_fixtures_pass(name: str) -> None:
    loaded = embedded_config("http://127.0.0.1:9")
    fixtures = load_fixtures(builtin_text(f"fixtures/{name}"), f"fixtures/{name}")
    results = run_fixtures(loaded, fixtures, Classifier(loaded))
    failures = {r.name: r.mismatches for r in results if not r.passed}
    assert not failures
    assert len(results) == len(fixtures.cases)


@pytest.mark.parametrize("name", PACKS)
def test_every_rule_of_a_pack_is_exercised(name: str) -> None:
    """A rule no fixture reaches is a rule nobody has seen work."""
    loaded = embedded_config("http://127.0.0.1:9")
    fixtures = load_fixtures(builtin_text(f"fixtures/{name}"), name)
    expected_rules = {case.expect.rule for case in fixtures.cases if case.expect.rule}
    pack_rules = {r.spec.id for r in loaded.rules if r.source.file == f"builtin:{name}"}
    assert pack_rules - expected_rules == set()


@pytest.mark.parametrize("name", SHAPE_PACKS)
def test_stack_pack_rules_need_the_stacks_own_shape(name: str) -> None:
    """A stack pack is on by default ahead of the fallbacks: a rule of it that matched on
    status alone would take every API's failures (and shadow the fallbacks in the index)."""
    doc = parse_yaml(builtin_text(name), name)
    pack = RulePack.model_validate(doc.data)
    assert pack.rules
    for rule in pack.rules:
        match = rule.match
        assert match.json_ or match.body or match.headers, rule.id
        assert rule.id.startswith(f"{name}-"), rule.id


def test_a_wrong_expectation_is_reported() -> None:
    loaded = embedded_config("http://127.0.0.1:9")
    fixtures = load_fixtures(
        "cases:\n  - name: wrong\n    response: {status: 404}\n    expect: {code: GONE}\n",
        "inline",
    )
    [result] = run_fixtures(loaded, fixtures)
    assert not result.passed
    assert result.mismatches == ("code: expected 'GONE', got 'NOT_FOUND'",)


def test_example_configs_load() -> None:
    examples = sorted(EXAMPLES.glob("*.yaml"))
    assert examples
    for path in examples:
        assert load_config(str(path)).rules


def test_example_rules_have_passing_fixtures() -> None:
    loaded = load_config(str(EXAMPLES / "gateway.yaml"))
    text = (EXAMPLES / "rules" / "demo-api.fixtures.yaml").read_text()
    results = run_fixtures(loaded, load_fixtures(text, "demo-api.fixtures.yaml"))
    assert [r.mismatches for r in results if not r.passed] == []
    assert len(results) >= 5
