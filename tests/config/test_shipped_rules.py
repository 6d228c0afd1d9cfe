"""A shipped rule that depends on nothing but itself is not checked again at each load
(`validate.self_contained`): these tests are what stands in for that check.

Every shipped rule has no problem in a config with no routes and no commands, every pattern
in it compiles with the `regex` module. A user's rules are checked at every load as before
(tests/config/test_config_errors.py: a bad regex is reported at its `FILE:LINE`).
"""

from __future__ import annotations

import pytest
import regex

from gateway.config.loader import builtin_names, builtin_text
from gateway.config.rule_model import RulePack
from gateway.config.validate import _regexes, rule_problems, self_contained
from gateway.config.yaml_model import validate_model
from gateway.config.yamlsrc import parse_yaml


def _pack(name: str) -> RulePack:
    return validate_model(RulePack, parse_yaml(builtin_text(name), f"builtin:{name}"))


@pytest.mark.parametrize("name", builtin_names())
def test_every_shipped_rule_has_no_problem_and_every_pattern_compiles(name: str) -> None:
    pack = _pack(name)
    for rule in pack.rules:
        commands = set(pack.commands)
        assert rule_problems(rule, commands, set()) == [], rule.id
        for _, pattern in _regexes(rule):
            assert isinstance(regex.compile(pattern).groupindex, dict)


def test_most_shipped_rules_are_self_contained() -> None:
    """Not vacuous: the skipped check is the one most shipped rules would get."""
    rules = [rule for name in builtin_names() for rule in _pack(name).rules]
    assert len(rules) > 100
    assert sum(map(self_contained, rules)) > len(rules) * 0.9
