"""The regex prefilter (gateway/config/prefilter.py) skips only searches that cannot match:
every pattern of every shipped pack and of the benchmark's rules answers every fixture text
(and its case and Unicode-folding variants) exactly as the unfiltered regex does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import regex
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bench import fixtures
from gateway.config.patterns import PrefilteredPattern, compile_regex
from gateway.config.prefilter import Needle, required_words
from gateway.config.rule_model import RuleSpec
from tests.support.paths import REPO

MAPPINGS = REPO / "mappings"


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def rule_patterns(specs: list[dict[str, Any]]) -> Iterator[str]:
    for spec in specs:
        match = RuleSpec.model_validate(spec).match
        if match.body is not None:
            yield match.body
        yield from (match.headers or {}).values()
        yield from (c.regex for c in match.json_conditions if c.regex)


def pack_rules() -> Iterator[dict[str, Any]]:
    for path in MAPPINGS.glob("*.yaml"):
        yield from yaml.safe_load(path.read_text())["rules"]


PATTERNS = sorted({*rule_patterns(list(pack_rules())), *rule_patterns(fixtures.custom_rules())})
BASE_TEXTS = sorted(
    {
        s
        for f in (MAPPINGS / "fixtures").glob("*.yaml")
        for s in strings(yaml.safe_load(f.read_text()))
    }
)


def variants(text: str) -> set[str]:
    """The text, its case changes, and the letters Unicode folds onto ASCII ones."""
    return {
        text,
        text.upper(),
        text.lower(),
        text.swapcase(),
        text.replace("k", "\u212a").replace("K", "\u212a"),  # KELVIN SIGN folds to k
        text.replace("s", "\u017f"),  # LATIN SMALL LETTER LONG S folds to s
    }


TEXTS = sorted({v for t in BASE_TEXTS for v in variants(t)})


def same(pattern: str, text: str) -> None:
    compiled = regex.compile(pattern)
    filtered = compile_regex(pattern)
    expected = compiled.search(text)
    got = filtered.search(text)
    assert (got is None) == (expected is None), (pattern, text)
    if isinstance(filtered, PrefilteredPattern) and got is not None:
        assert got.span() == expected.span() and got.groupdict() == expected.groupdict()


def _needles(pattern: Any) -> Any:
    return pattern.needles if isinstance(pattern, PrefilteredPattern) else None


def test_most_shipped_patterns_get_a_prefilter() -> None:
    """Not a vacuous check: the prefilter is there for most patterns tested below."""
    filtered = [p for p in PATTERNS if _needles(compile_regex(p)) is not None]
    assert len(PATTERNS) > 50 and len(filtered) > len(PATTERNS) // 2


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_prefiltered_pattern_answers_every_fixture_text_as_the_regex(pattern: str) -> None:
    for text in TEXTS:
        same(pattern, text)


@given(st.sampled_from(PATTERNS), st.data())
def test_texts_made_of_the_patterns_words_answer_as_the_regex(pattern: str, data: Any) -> None:
    needles = required_words(pattern) or (Needle("x", False),)
    words = [n.word for n in needles] + ["429", "ENOENT", " ", ":", "\u212a", "\u017f"]
    parts = st.sampled_from(words) | st.text(max_size=4)
    text = "".join(data.draw(st.lists(parts, max_size=8)))
    same(pattern, data.draw(st.sampled_from(sorted(variants(text)))))


@pytest.mark.parametrize(
    "pattern",
    [
        r"\p{Lu}ENOENT",  # the regex module's own syntax
        r"(?:ENOENT){e<=1}",  # fuzzy: `re` would read the brace as text
        r"(?V1)[[a-z]--[aeiou]]NOENT",
        r"(?a)ENOENT",  # flags other than i, x, s, m: not read
        r"EN|OENT",  # an alternative with no word of three letters
        r"(?:ENOENT)?x",  # optional
        r"(?!ENOENT)x",  # a negative lookahead requires nothing
    ],
)
def test_no_prefilter_where_the_words_are_not_known(pattern: str) -> None:
    assert required_words(pattern) is None


def test_words_and_case() -> None:
    assert required_words(r"\bENOENT\b") == (Needle("ENOENT", False),)
    assert required_words(r"(?i)Input validation error") == (
        Needle("input validation error", True),
    )
    assert required_words(r"(?i:Unknown) Tool") == (Needle("unknown", True),)
    # Under IGNORECASE a non-ASCII letter ends a word: Unicode folding decides its matches.
    assert required_words("(?i)caf\u00e9 ole") == (Needle(" ole", True),)
    kelvin = compile_regex(r"(?i)\bunknown tool\b")
    assert kelvin.search("un\u212anown tool") is not None  # non-ASCII text is always searched
