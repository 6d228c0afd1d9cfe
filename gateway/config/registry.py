"""The `fix_command` registry and its load-time safety checks (docs/rules.md, commands).

An agent pastes a `fix_command` without reading it, so every registered command is checked
once, at load, against the rules that make blind execution safe: verbatim (no placeholders),
one program (no shell syntax), idempotent, never destructive, and from a declared companion.
"""

from __future__ import annotations

import shlex

import regex

from gateway.config.model_base import CommandSpec

_PLACEHOLDER = regex.compile(r"<[^<>]*>|\{[^{}]*\}|\$[A-Za-z_{]")
_SHELL_SYNTAX = ("|", ";", "&", ">", "<", "`", "$(")


def command_problems(command_id: str, spec: CommandSpec, companions: list[str] | None) -> list[str]:
    """Every reason `spec` may not be offered as a fix_command; empty when it is safe."""
    problems: list[str] = []
    run = spec.run
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in run):
        problems.append("must be one line with no control characters (newline, tab, ESC …)")
    if _PLACEHOLDER.search(run):
        problems.append(
            "contains a placeholder (<…>, {…} or $VAR): a fix_command must be verbatim-executable;"
            " state what the caller must supply in fix_required instead"
        )
    found = sorted({token for token in _SHELL_SYNTAX if token in run})
    if found:
        problems.append(
            f"contains shell syntax {found}: a fix_command is one invocation, never a pipeline"
        )
    if spec.destructive:
        problems.append("is declared destructive: destructive commands are never remediation")
    if not spec.idempotent:
        problems.append("is not declared idempotent: true (an agent may run it more than once)")
    program = _program(run)
    if program is None:
        problems.append("cannot be split into words (unbalanced quotes?)")
    elif companions is not None and program not in companions:
        problems.append(f"runs {program!r}, which is not in the declared companions {companions}")
    return problems


def _program(run: str) -> str | None:
    try:
        words = shlex.split(run)
    except ValueError:
        return None
    return words[0] if words else None
