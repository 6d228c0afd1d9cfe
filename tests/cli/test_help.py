"""`mendpoint --help` and every command's: the product described, every argument explained."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from gateway.cli.parser import build_parser

INTERNAL = {"--worker-link"}
"""Arguments no user types (the supervisor's link to a worker): hidden from --help."""


def commands(
    parser: argparse.ArgumentParser, name: str = "mendpoint"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser and every command's, by the name a user types."""
    yield name, parser
    for action in arguments(parser):
        if isinstance(action.choices, dict):  # the commands: name -> their parser
            for command, sub in action.choices.items():
                yield from commands(sub, f"{name} {command}")


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    # argparse lists a parser's arguments in no public attribute; should `_actions` ever go,
    # this fails with an AttributeError rather than passing with nothing walked.
    return list(parser._actions)


def test_every_argument_has_help() -> None:
    walked, hidden, missing = 0, set[str](), list[str]()
    for name, parser in commands(build_parser()):
        for action in arguments(parser):
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            walked += 1
            if action.help == argparse.SUPPRESS:
                hidden.update(action.option_strings)
            elif not (action.help or "").strip():
                missing.append(label)
    assert walked > 60  # every command's arguments, not the top level's alone
    assert not missing, f"arguments without help text: {missing}"
    assert hidden == INTERNAL


def test_every_command_says_what_it_does_atop_its_own_help() -> None:
    described = 0
    for name, parser in commands(build_parser()):
        if name == "mendpoint":
            continue
        assert parser.description, name
        assert parser.description in " ".join(parser.format_help().split()), name
        described += 1
    assert described == 11


def test_the_top_level_help_describes_mendpoint() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "Mendpoint: a transparent reverse proxy" in text
    for term in ("MCP tool server", "recovery envelope", "fix_command", "docs/spec.md"):
        assert term in text
    assert "command line:" not in text  # the parser module's docstring, as it was
    assert "mendpoint serve --upstream" in text  # where to start
