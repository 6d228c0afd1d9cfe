"""What loading a config produces: `LoadedConfig` and the sourced items it holds.

A module of its own so that the loader (which builds a `LoadedConfig`) and the whole-config
checks in `validate` (which read one) both depend on it instead of on each other. Every rule,
command and skill remembers the file, line and path it was written at, for error messages.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from gateway.config.model_base import CommandSpec
from gateway.config.models import CallersSpec, GatewayConfig
from gateway.config.rule_model import PolicySpec, RuleSpec, SkillSpec
from gateway.config.session_keys import SessionKeys
from gateway.config.yamlsrc import YamlDoc

BUILTIN_PREFIX = "builtin:"  # how a shipped pack is named, in `include:` and as a rule's file


@dataclass(frozen=True, slots=True)
class Sourced:
    """Where a rule, command or skill was written: file, line and its path in that file."""

    file: str
    line: int | None
    path: tuple[str | int, ...] = ()


@dataclass(frozen=True, slots=True)
class SourcedRule:
    spec: RuleSpec
    source: Sourced
    is_default: bool


@dataclass(frozen=True, slots=True)
class SourcedCommand:
    spec: CommandSpec
    source: Sourced


@dataclass(slots=True)
class LoadedConfig:
    """A fully validated config: what the classifier and the app are built from."""

    config: GatewayConfig
    source: str
    rules: list[SourcedRule] = field(default_factory=list)
    commands: dict[str, SourcedCommand] = field(default_factory=dict)
    companions: list[str] | None = None
    skills: list[SkillSpec] = field(default_factory=list)
    policies: list[PolicySpec] = field(default_factory=list)
    skill_sources: dict[str, Sourced] = field(default_factory=dict)
    policy_sources: list[Sourced] = field(default_factory=list)
    callers: CallersSpec | None = None
    files: list[str] = field(default_factory=list)
    docs: dict[str, YamlDoc] = field(default_factory=dict)
    packs: list[str] = field(default_factory=list)  # every rule file, in match order
    # Read from `resolver.token_file` (or MENDPOINT_RESOLVER_TOKEN_FILE); never printed.
    resolver_token: str | None = field(default=None, repr=False)
    # `admin_token_file` (or MENDPOINT_ADMIN_TOKEN_FILE), an absolute path, checked to hold
    # tokens; the admin listener reads it again when it changes (resolve.auth.TokenFile).
    admin_token_file: str | None = None
    # `console.drafts_file`, an absolute path, checked to be one of the `include:` files.
    drafts_file: str | None = None
    # From `resolver.tls`: whom an https:// resolver must be, and the gateway's client cert.
    resolver_tls: ssl.SSLContext | None = field(default=None, repr=False)
    # The first line of `fleet.password_file`: the store's password; never printed.
    fleet_password: str | None = field(default=None, repr=False)
    # From `fleet.sessions.key_file`: what signs bridge session ids and relayed requests.
    session_keys: SessionKeys | None = field(default=None, repr=False)
    fleet_keys: SessionKeys | None = field(default=None, repr=False)
    """What signs what replicas share through the store (`fleet.key_file`, else the sessions'
    key file); set whenever `fleet` is."""

    def line_of(self, source: Sourced, *subpath: str | int) -> int | None:
        """The line of a field inside a sourced item, for error messages."""
        doc = self.docs.get(source.file)
        return doc.line_of((*source.path, *subpath)) if doc is not None else source.line
