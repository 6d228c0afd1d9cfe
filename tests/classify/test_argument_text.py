"""Which argument a failure's text is about, and which arguments carry a credential
(gateway.classify.argument_text; docs/rules.md#arguments-named-in-a-failure)."""

from __future__ import annotations

import pytest

from gateway.classify.argument_text import (
    echoed_argument,
    is_credential,
    named_argument,
    only_argument,
    words,
)


def test_names_split_into_the_words_a_text_says_them_in() -> None:
    assert words("file_path") == words("filePath") == words("File path") == ["file", "path"]
    assert words("HTTPHeader x2") == ["http", "header", "x", "2"]


@pytest.mark.parametrize(
    ("text", "names", "values", "expected"),
    [
        ("Unsupported operation: modulo", ("a", "operation"), (), "operation"),
        ("the file path is a directory", ("filePath", "mode"), (), "filePath"),
        (
            "Shell operator ';' is not supported",
            ("command", "cwd"),
            (("command", "a; b"),),
            "command",
        ),
        ("[Errno 21] Is a directory: '/srv'", ("src", "dst"), (("dst", "/srv"),), "dst"),
        ("math domain error", ("expression",), (), "expression"),
        # a one-word name under three letters is too common a word; two arguments, none named
        ("a is not a number", ("a", "b"), (("a", "x"), ("b", "y")), None),
        ("the frobnicator is out of phase", ("x", "y"), (), None),
    ],
)
def test_named_argument(
    text: str, names: tuple[str, ...], values: tuple[tuple[str, str], ...], expected: str | None
) -> None:
    assert named_argument(text, names, values) == expected


def test_an_echo_is_the_whole_value_or_a_part_the_text_quotes() -> None:
    assert echoed_argument("no branch feature-x here", (("branch", "feature-x"),)) == "branch"
    assert echoed_argument('bad token "&&"', (("command", "ls && rm"),)) == "command"
    assert echoed_argument("ab is short", (("tag", "ab"),)) is None  # unquoted, too short


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'item-42'", "item_id"),
        ("KeyError: 'item-42'", "item_id"),
        ("item-42.", "item_id"),
        ("item-42 is gone", None),
        ("''", None),
    ],
)
def test_only_the_value(text: str, expected: str | None) -> None:
    assert only_argument(text, (("item_id", "item-42"),)) == expected


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "apiKey",
        "token",
        "github_token",
        "accessKey",
        "password",
        "client_secret",
        "Authorization",
        "credentials",
        "private_key",
    ],
)
def test_credential_arguments(name: str) -> None:
    assert is_credential(name)


@pytest.mark.parametrize(
    "name", ["page_token", "nextToken", "max_tokens", "key", "query", "author", "keyword"]
)
def test_arguments_that_are_no_credential(name: str) -> None:
    assert not is_credential(name)
