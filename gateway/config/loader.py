"""Loading a gateway config and its rule packs into one validated `LoadedConfig`.

Takes a config path (or just an upstream URL for the embedded default) and returns every
rule in match order, the merged command registry and the catalog, each rule remembering its
file and line. Any problem anywhere becomes one `ConfigError` listing all of them.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from typing import Any

from gateway.config.errors import ConfigError, Problem
from gateway.config.fleet_files import add_fleet_files
from gateway.config.loaded import (
    BUILTIN_PREFIX,
    LoadedConfig,
    Sourced,
    SourcedCommand,
    SourcedRule,
)
from gateway.config.models import CallersSpec, GatewayConfig, KeysFile
from gateway.config.route_model import RouteSpec
from gateway.config.route_modes import apply_route_modes
from gateway.config.rule_model import RulePack
from gateway.config.salvage import is_inert, salvage
from gateway.config.secrets import ADMIN_TOKEN_ENV, TOKEN_ENV, TokenError, read_tokens
from gateway.config.tls import resolve_resolver_tls, resolve_route_tls
from gateway.config.validate import validate_loaded
from gateway.config.yaml_model import M, validate_model
from gateway.config.yamlsrc import YamlDoc, parse_yaml, read_yaml

DEFAULT_PACKS = ("http-defaults", "mcp-defaults")
# Packs whose every rule needs one stack's own error shape (a FastAPI 422, a DRF 403, ...):
# no other API can reach them, so they are on with the defaults, matched after the user's
# rules and ahead of the fallbacks, and `serve --upstream URL` answers specifically with no
# config (docs/packs/index.md). Listed in `include:`, a pack is matched where it is listed.
SHAPE_PACKS = (
    "fastapi",
    "django",
    "flask",
    "express",
    "spring-boot",
    "aspnet-core",
    "rails",
    "problem-details",
    "google-aip193",
    "aws",
    "kubernetes",
    "stripe",
)


def load_config(path: str, doc: YamlDoc | None = None) -> LoadedConfig:
    """Load and validate a config file and everything it includes.

    Every problem of every stage is reported at once: a config or pack that fails its model
    is salvaged (`salvage.py`) so the packs it includes and the whole-config checks still run.
    `doc` is the file already read (`read_yaml(path)`), by a caller that needed its data
    before the models (`mendpoint stdio`, relay_limits.py): a file is read once.
    """
    try:
        doc = read_yaml(path) if doc is None else doc
        found = _Found()
        config = found.validated(GatewayConfig, doc)
        if config is None:
            raise ConfigError(found.problems)
    except ConfigError as exc:
        exc.files = (os.path.abspath(path),)
        raise
    return _assemble(config, doc, os.path.dirname(path) or ".", found)


def load_catalog(path: str) -> LoadedConfig:
    """For `mendpoint resolver`: a gateway config, or a bare rule pack holding the catalog.

    A central resolver serves no routes, so a pack with only `skills:` and `policies:` is
    enough; it is validated exactly as it would be inside a gateway config.
    """
    doc = read_yaml(path)
    if isinstance(doc.data, dict) and "routes" in doc.data:
        return load_config(path)
    pack = validate_model(RulePack, doc)
    placeholder = RouteSpec(name="resolver", upstream="http://127.0.0.1:9")
    config = GatewayConfig(routes=[placeholder], defaults=False)
    loaded = LoadedConfig(config=config, source=doc.file, companions=pack.companions)
    loaded.files.append(os.path.abspath(path))
    problems: list[Problem] = []
    _add_pack(loaded, pack, doc, problems, is_default=False)
    problems = problems or validate_loaded(loaded)
    if problems:
        raise ConfigError(problems)
    return loaded


def embedded_config(
    upstream: str, listen: str = "127.0.0.1:8080", mode: str | None = None
) -> LoadedConfig:
    """The no-file default: one route `/` to `upstream`, shipped rules, mode additive."""
    route: dict[str, Any] = {"name": "default", "prefix": "/", "upstream": upstream}
    if mode:
        route["mode"] = mode
    data: dict[str, Any] = {"listen": listen, "routes": [route]}
    doc = YamlDoc(file="<command line>", data=data)
    config = validate_model(GatewayConfig, doc)
    return _assemble(config, doc, os.getcwd())


def builtin_names() -> list[str]:
    """Names usable as `builtin:NAME`, from the packaged `mappings/` directory."""
    root = resources.files("gateway.mappings")
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in root.iterdir()
        if entry.name.endswith(".yaml") and entry.is_file()
    )


def builtin_text(name: str) -> str:
    return resources.files("gateway.mappings").joinpath(f"{name}.yaml").read_text("utf-8")


class _Found:
    """Problems of the files' models, and the stand-ins (file, field prefix) that salvaged
    them for the later stages."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.inert: dict[str, set[str]] = {}

    def validated(self, model: type[M], doc: YamlDoc) -> M | None:
        try:
            return validate_model(model, doc)
        except ConfigError as exc:
            self.problems.extend(exc.problems)
        if not isinstance(doc.data, dict):
            return None
        value, inert = salvage(model, doc.data)
        self.inert.setdefault(doc.file, set()).update(inert)
        return value

    def with_later(self, problems: list[Problem]) -> list[Problem]:
        """These and the later stages' problems, but for those of stand-ins (not the user's)."""
        later = [p for p in problems if not is_inert(p.field, self.inert.get(p.file, set()))]
        return [*self.problems, *later]


def _assemble(
    config: GatewayConfig, doc: YamlDoc, base_dir: str, found: _Found | None = None
) -> LoadedConfig:
    """Every file the config names joins `loaded.files` before it is read: the error of a
    load that fails names them too (`ConfigError.files`), a missing one included."""
    found = found or _Found()
    loaded = LoadedConfig(
        config=config, source=doc.file, companions=config.companions, callers=config.callers
    )
    if doc.file != "<command line>":
        loaded.files.append(os.path.abspath(doc.file))
    problems: list[Problem] = []
    if config.callers is not None and config.callers.keys_file is not None:
        problems.extend(_add_keys_file(loaded, config.callers, doc, base_dir))
    problems.extend(_add_resolver_token(loaded, doc, base_dir))
    problems.extend(_add_admin_token(loaded, doc, base_dir))
    problems.extend(_add_drafts_file(loaded, doc, base_dir))
    loaded.config, tls_problems = resolve_route_tls(config, doc, base_dir)
    problems.extend(tls_problems)
    problems.extend(_add_resolver_tls(loaded, doc, base_dir))
    problems.extend(add_fleet_files(loaded, doc, base_dir))
    own = RulePack(
        rules=config.rules,
        commands=config.commands,
        skills=config.skills,
        policies=config.policies,
    )
    _add_pack(loaded, own, doc, problems, is_default=False)
    defaults: list[tuple[RulePack, YamlDoc]] = []
    included: list[tuple[RulePack, YamlDoc]] = []  # the user's files, for `route_modes:`
    seen: set[str] = set()
    for index, entry in enumerate(config.include):
        line = doc.line_of(("include", index))
        name = _builtin_name(entry)
        if entry in seen:
            problems.append(Problem(doc.file, line, f"include[{index}]", "listed twice"))
            continue
        seen.add(entry)
        if name is not None and name not in builtin_names():
            known = ", ".join(BUILTIN_PREFIX + n for n in builtin_names())
            message = f"unknown pack {entry!r}; the builtin packs are {known}"
            problems.append(Problem(doc.file, line, f"include[{index}]", message))
            continue
        try:
            loaded_pack = _load_pack(entry, base_dir, loaded, found)
        except ConfigError as exc:
            problems.extend(_relocate(exc.problems, doc.file, line, index))
            continue
        if loaded_pack is None:
            continue
        pack, pack_doc = loaded_pack
        if name in DEFAULT_PACKS:
            defaults.append((pack, pack_doc))
        else:
            _add_pack(loaded, pack, pack_doc, problems, is_default=False)
        if name is None:
            included.append((pack, pack_doc))
    loaded.config, moves = apply_route_modes(loaded.config, included)
    problems.extend(moves)
    if config.defaults:
        listed = {_builtin_name(e) for e in config.include}
        for name in SHAPE_PACKS:
            if name not in listed:
                pack, pack_doc = _load_builtin(name, loaded)
                _add_pack(loaded, pack, pack_doc, problems, is_default=False)
        for name in DEFAULT_PACKS:
            if name not in listed:
                defaults.append(_load_builtin(name, loaded))
    for pack, pack_doc in defaults:
        _add_pack(loaded, pack, pack_doc, problems, is_default=True)
    problems.extend(validate_loaded(loaded))
    problems = found.with_later(problems)
    if problems:
        error = ConfigError(problems)
        error.files = tuple(dict.fromkeys(loaded.files))
        raise error
    return loaded


def _relocate(problems: list[Problem], file: str, line: int | None, index: int) -> list[Problem]:
    """A pack that cannot be opened is reported at the `include:` line that names it."""
    return [
        Problem(file, line, f"include[{index}]", f"{p.file}: {p.message}")
        if p.line is None and not p.field
        else p
        for p in problems
    ]


def _load_pack(
    entry: str, base_dir: str, loaded: LoadedConfig, found: _Found | None = None
) -> tuple[RulePack, YamlDoc] | None:
    """The pack, salvaged if it fails its model (problems go to `found`); raises when the
    file cannot be read or parsed."""
    name = _builtin_name(entry)
    if name is not None:
        return _load_builtin(name, loaded)
    path = entry if os.path.isabs(entry) else os.path.normpath(os.path.join(base_dir, entry))
    loaded.files.append(os.path.abspath(path))  # before reading: a missing file is watched
    doc = read_yaml(path)
    loaded.docs[doc.file] = doc
    if found is None:
        return validate_model(RulePack, doc), doc
    value = found.validated(RulePack, doc)
    return None if value is None else (value, doc)


def _load_builtin(name: str, loaded: LoadedConfig) -> tuple[RulePack, YamlDoc]:
    pack, doc = _builtin_pack(name)
    loaded.docs[doc.file] = doc
    return pack, doc


@functools.lru_cache(maxsize=32)
def _builtin_pack(name: str) -> tuple[RulePack, YamlDoc]:
    """Shipped packs never change while the process runs: parse each once (reloads included)."""
    doc = parse_yaml(builtin_text(name), f"{BUILTIN_PREFIX}{name}")
    return validate_model(RulePack, doc), doc


def _builtin_name(entry: str) -> str | None:
    return entry[len(BUILTIN_PREFIX) :] if entry.startswith(BUILTIN_PREFIX) else None


def _add_pack(
    loaded: LoadedConfig,
    pack: RulePack,
    doc: YamlDoc,
    problems: list[Problem],
    *,
    is_default: bool,
) -> None:
    loaded.docs[doc.file] = doc
    loaded.packs.append(doc.file)
    for index, rule in enumerate(pack.rules):
        rule_path: tuple[str | int, ...] = ("rules", index)
        source = Sourced(doc.file, doc.line_of(rule_path), rule_path)
        loaded.rules.append(SourcedRule(rule, source, is_default))
    for command_id, command in pack.commands.items():
        path: tuple[str | int, ...] = ("commands", command_id)
        source = Sourced(doc.file, doc.line_of(path), path)
        if command_id in loaded.commands:
            first = loaded.commands[command_id].source
            message = f"command id already defined at {first.file}:{first.line}"
            problems.append(Problem(doc.file, source.line, f"commands.{command_id}", message))
            continue
        loaded.commands[command_id] = SourcedCommand(command, source)
    if pack.companions is not None:
        loaded.companions = sorted({*(loaded.companions or []), *pack.companions})
    for index, skill in enumerate(pack.skills):
        path = ("skills", index)
        source = Sourced(doc.file, doc.line_of(path), path)
        earlier = loaded.skill_sources.get(skill.name)
        if earlier is not None:
            message = f"skill {skill.name!r} already defined at {earlier.file}:{earlier.line}"
            problems.append(Problem(doc.file, source.line, f"skills[{index}].name", message))
            continue
        loaded.skill_sources[skill.name] = source
        loaded.skills.append(skill)
    for index, policy in enumerate(pack.policies):
        path = ("policies", index)
        loaded.policy_sources.append(Sourced(doc.file, doc.line_of(path), path))
        loaded.policies.append(policy)


def _add_keys_file(
    loaded: LoadedConfig, callers: CallersSpec, doc: YamlDoc, base_dir: str
) -> list[Problem]:
    """Merge `callers.keys_file` into the caller keys; duplicate names or keys are errors."""
    assert callers.keys_file is not None
    path = callers.keys_file
    path = path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))
    loaded.files.append(os.path.abspath(path))
    try:
        keys_doc = read_yaml(path)
        extra = validate_model(KeysFile, keys_doc).keys
    except ConfigError as exc:
        return exc.problems
    problems: list[Problem] = []
    names = {k.name for k in callers.keys}
    digests = {k.key for k in callers.keys}
    for index, key in enumerate(extra):
        line = keys_doc.line_of(("keys", index))
        if key.name in names or key.key in digests:
            problems.append(
                Problem(
                    keys_doc.file, line, f"keys[{index}]", "caller name or key hash already defined"
                )
            )
        names.add(key.name)
        digests.add(key.key)
    loaded.callers = callers.model_copy(update={"keys": [*callers.keys, *extra]})
    return problems


def _add_resolver_token(loaded: LoadedConfig, doc: YamlDoc, base_dir: str) -> list[Problem]:
    """Read the remote resolver's token; MENDPOINT_RESOLVER_TOKEN_FILE wins over the config.

    The file joins `loaded.files`, so a rotated token (a Secret updated in place) reloads the
    config like any edited file.
    """
    spec = loaded.config.resolver
    from_env = os.environ.get(TOKEN_ENV, "").strip()
    if spec.url is None or not (from_env or spec.token_file):
        return []
    if from_env:
        path, file, line, field = from_env, TOKEN_ENV, None, ""
    else:
        assert spec.token_file is not None
        path, file, field = spec.token_file, doc.file, "resolver.token_file"
        line = doc.line_of(("resolver", "token_file"))
    path = path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))
    loaded.files.append(os.path.abspath(path))
    try:
        loaded.resolver_token = read_tokens(path)[0]
    except TokenError as exc:
        return [Problem(file, line, field, str(exc))]
    return []


def _add_admin_token(loaded: LoadedConfig, doc: YamlDoc, base_dir: str) -> list[Problem]:
    """Check the admin listener's token file; MENDPOINT_ADMIN_TOKEN_FILE wins over the config.

    Only its path is kept: the admin listener reads the tokens itself, and again whenever the
    file changes, so a rotated Secret needs no reload (docs/security.md#admin-authentication).
    Watched all the same: a reload checks it again, and says so when it has become unusable.
    """
    from_env = os.environ.get(ADMIN_TOKEN_ENV, "").strip()
    configured = loaded.config.admin_token_file
    if not (from_env or configured):
        return []
    if from_env:
        path, file, line, field = from_env, ADMIN_TOKEN_ENV, None, ""
    else:
        assert configured is not None
        path, file, field = configured, doc.file, "admin_token_file"
        line = doc.line_of(("admin_token_file",))
    path = path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))
    loaded.files.append(os.path.abspath(path))
    try:
        read_tokens(path)
    except TokenError as exc:
        return [Problem(file, line, field, str(exc))]
    loaded.admin_token_file = os.path.abspath(path)
    return []


def _add_drafts_file(loaded: LoadedConfig, doc: YamlDoc, base_dir: str) -> list[Problem]:
    """`console.drafts_file` must be a file `include:` lists: the console writes nowhere
    else, and what it saves is then loaded and watched as every included file is."""
    configured = loaded.config.console.drafts_file
    if configured is None:
        return []
    path = os.path.abspath(_resolved(configured, base_dir))
    included = {
        os.path.abspath(_resolved(entry, base_dir))
        for entry in loaded.config.include
        if _builtin_name(entry) is None
    }
    if path not in included:
        line = doc.line_of(("console", "drafts_file"))
        message = (
            f"{configured!r} is not a file of `include:`: list it there (a rule file, e.g. "
            "one holding `rules: []`) so what the console saves is loaded and watched "
            "(docs/operations.md#console)"
        )
        return [Problem(doc.file, line, "console.drafts_file", message)]
    loaded.drafts_file = path
    return []


def _resolved(path: str, base_dir: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))


def _add_resolver_tls(loaded: LoadedConfig, doc: YamlDoc, base_dir: str) -> list[Problem]:
    """The SSL context for an https:// resolver from `resolver.tls` (the same block a route
    has); its files join `loaded.files`, so renewed certificates reload the config."""
    spec = loaded.config.resolver.tls
    if spec is None:
        return []
    context, files, problems = resolve_resolver_tls(spec, doc, base_dir)
    loaded.resolver_tls = context
    loaded.files.extend(files)
    return problems


__all__ = [
    "BUILTIN_PREFIX",
    "DEFAULT_PACKS",
    "builtin_names",
    "builtin_text",
    "embedded_config",
    "load_catalog",
    "load_config",
]
