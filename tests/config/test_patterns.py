"""compile_regex: a pattern without metacharacters is a substring test with regex's answers."""

from __future__ import annotations

import regex
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.patterns import LiteralPattern, compile_regex

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
