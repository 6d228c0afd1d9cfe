"""compile_regex: a pattern without metacharacters is a substring test with regex's answers."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.patterns import LiteralPattern, PrefilteredPattern, compile_regex

WORDS = st.text(alphabet="abcjsonhtmlxml/-;=_:", max_size=12)  # no metacharacters


def test_literals_skip_the_regex_engine_and_everything_else_does_not() -> None:
    assert isinstance(compile_regex("json"), LiteralPattern)
    assert isinstance(compile_regex("text/html"), LiteralPattern)
    for pattern in ("a.b", "^json", "problem\\+json", "(?i)json", "x{2}", "a b", "a#b", ""):
        assert not isinstance(compile_regex(pattern), LiteralPattern), pattern


@given(WORDS.filter(bool), WORDS)
def test_a_literal_finds_what_regex_finds(pattern: str, text: str) -> None:
    compiled = compile_regex(pattern)
    found = compiled.search(text, timeout=0.05)
    expected = regex.search(pattern, text, timeout=0.05)
    assert (found is None) == (expected is None)
    if found is not None:
        assert found.groupdict() == {}
    assert compiled.groupindex == regex.compile(pattern).groupindex


def test_a_pattern_compiles_when_first_used_and_a_bad_one_raises_then() -> None:
    """Compiled on first use (no start pays for rules it never reaches); the validation's
    `groupindex` is a use, so a user's bad regex still fails the load (test_config_errors)."""
    bad = compile_regex("(unclosed-lazily")
    assert isinstance(bad, PrefilteredPattern)
    with pytest.raises(regex.error):
        bad.search("unclosed-lazily x")
    with pytest.raises(regex.error):
        _ = bad.groupindex
    good = compile_regex(r"(?P<code>E[A-Z]+)\b")
    assert good.groupindex == {"code": 1}
    assert good.compiled is good.compiled  # compiled once
    found = good.search("errno ENOENT here")
    assert found is not None and found.group("code") == "ENOENT"
