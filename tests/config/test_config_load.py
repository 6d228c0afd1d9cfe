"""Loading a good config: routes, packs in order, the shipped defaults last, the registry merged.

docs/rules.md: inline `rules:` first, then the `include:` packs in the order listed; the shipped
defaults are fallbacks matched after every other rule wherever they are listed, and are on
unless `defaults: false`. docs/configuration.md: `serve --upstream URL` needs no file at all.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from gateway.config.errors import ConfigError
from gateway.config.loaded import BUILTIN_PREFIX, LoadedConfig
from gateway.config.loader import (
    DEFAULT_PACKS,
    SHAPE_PACKS,
    builtin_names,
    builtin_text,
    embedded_config,
    load_config,
)
from gateway.config.rule_model import RulePack
from gateway.config.yaml_model import validate_model
from gateway.config.yamlsrc import parse_yaml
from gateway.failure import Mode

CONFIG = textwrap.dedent(
    """\
    listen: 127.0.0.1:8081
    admin: 127.0.0.1:9091
    include:
      - builtin:http-defaults
      - packs/first.yaml
      - packs/second.yaml
    routes:
      - name: data
        prefix: /v1/data
        upstream: http://127.0.0.1:9000/
        mode: envelope
        idempotent_methods: [get, head]
      - name: api
        upstream: https://api.example.com/base
    commands:
      auth_refresh: {run: "demo-cli auth refresh", idempotent: true}
    companions: [demo-cli]
    rules:
      - id: inline-1
        match: {routes: [data], status: [401]}
        error:
          code: CREDENTIALS_EXPIRED
          category: AUTH_REQUIRED
          fix_required: "Refresh credentials, then reissue"
          fix_command: cache_clear
      - id: inline-2
        match: {status: [400], json: {path: detail.0.msg, regex: "row (?P<row>\\\\d+)"}}
        error:
          code: ROW_INVALID
          category: VALIDATION_ERROR
          message: "Row {row} is invalid"
          fix_required: "Fix row {row}"
    """
)

FIRST = textwrap.dedent(
    """\
    # the first pack; its rule uses a command the config defines
    rules:
      - id: first-1
        match: {status: [401], path: "/v1/**"}
        error:
          code: TOKEN_EXPIRED
          category: AUTH_REQUIRED
          fix_required: "Refresh the token"
          fix_command: auth_refresh
      - id: first-2
        match: {transport: [connect_refused], methods: [POST]}
        error: {code: DOWN, category: UNAVAILABLE, retryable: true, retry_after_ms: 250}
    commands:
      cache_clear: {run: "other-cli cache clear", idempotent: true}
    companions: [other-cli]
    """
)

SECOND = textwrap.dedent(
    """\
    rules:
      - id: second-1
        match: {status: ["5xx"], methods: [GET]}
        error: {code: FLAKY, category: UNAVAILABLE, retryable: true}
    skills:
      - name: csv-fixer
        version: "1.0"
        recovers: [format_inspection]
        repair: normalize
        purpose: "Normalise CSV rows"
    policies:
      - allow: {intent: format_inspection, skills: [csv-fixer]}
    """
)


def _default_rule_ids(packs: tuple[str, ...] = DEFAULT_PACKS) -> list[str]:
    """The rule ids of the shipped default packs, in pack order, read straight from the files."""
    ids: list[str] = []
    for name in packs:
        pack = validate_model(RulePack, parse_yaml(builtin_text(name), name))
        ids.extend(rule.id for rule in pack.rules)
    return ids


def _write(tmp_path: Path, config: str = CONFIG) -> Path:
    (tmp_path / "packs").mkdir(exist_ok=True)
    (tmp_path / "packs" / "first.yaml").write_text(FIRST, encoding="utf-8")
    (tmp_path / "packs" / "second.yaml").write_text(SECOND, encoding="utf-8")
    path = tmp_path / "gateway.yaml"
    path.write_text(config, encoding="utf-8")
    return path


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedConfig:
    return load_config(str(_write(tmp_path)))


def test_shipped_defaults_exist() -> None:
    assert "http-defaults" in builtin_names()
    assert set(DEFAULT_PACKS) <= set(builtin_names())
    assert len(_default_rule_ids()) > 10


def test_routes_and_settings_load(loaded: LoadedConfig) -> None:
    config = loaded.config
    assert config.listen == "127.0.0.1:8081"
    assert config.admin == "127.0.0.1:9091"
    data, api = config.routes
    assert (data.name, data.prefix, data.upstream, data.mode) == (
        "data",
        "/v1/data",
        "http://127.0.0.1:9000",
        Mode.ENVELOPE,
    )
    assert data.idempotent_methods == ["GET", "HEAD"]
    assert (api.prefix, api.upstream, api.mode) == (
        "/",
        "https://api.example.com/base",
        Mode.ADDITIVE,
    )
    assert "GET" in api.idempotent_methods and "POST" not in api.idempotent_methods


def test_rule_order_inline_then_packs_then_defaults_last(loaded: LoadedConfig) -> None:
    """`builtin:http-defaults` is listed first in `include:` but still matches last; the
    shipped stack packs come between the config's own rules and the fallbacks."""
    ids = [rule.spec.id for rule in loaded.rules]
    own = ["inline-1", "inline-2", "first-1", "first-2", "second-1"]
    shape = _default_rule_ids(SHAPE_PACKS)
    assert ids == own + shape + _default_rule_ids()
    assert [rule.is_default for rule in loaded.rules] == [False] * len(own + shape) + [True] * (
        len(ids) - len(own + shape)
    )


def test_rules_remember_file_and_line(loaded: LoadedConfig, tmp_path: Path) -> None:
    by_id = {rule.spec.id: rule.source for rule in loaded.rules}
    assert (by_id["inline-1"].file, by_id["inline-1"].line) == (str(tmp_path / "gateway.yaml"), 19)
    assert (by_id["inline-2"].line, by_id["first-1"].line, by_id["first-2"].line) == (26, 3, 10)
    assert by_id["first-1"].file == os.path.join(str(tmp_path), "packs/first.yaml")
    assert by_id["second-1"].file.endswith("packs/second.yaml")
    assert by_id["http-400"].file == "builtin:http-defaults"
    assert loaded.line_of(by_id["inline-2"], "error", "message") == 31


def test_registry_catalog_and_files_are_merged(loaded: LoadedConfig, tmp_path: Path) -> None:
    assert set(loaded.commands) == {"auth_refresh", "cache_clear"}
    assert loaded.commands["cache_clear"].spec.run == "other-cli cache clear"
    assert loaded.commands["cache_clear"].source.line == 14
    assert loaded.companions == ["demo-cli", "other-cli"]
    assert [skill.name for skill in loaded.skills] == ["csv-fixer"]
    assert [policy.allow.intent for policy in loaded.policies] == ["format_inspection"]
    assert loaded.files == [
        str(tmp_path / "gateway.yaml"),
        str(tmp_path / "packs" / "first.yaml"),
        str(tmp_path / "packs" / "second.yaml"),
    ]


def test_includes_resolve_against_the_config_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_config(os.path.relpath(path, elsewhere))
    assert [r.spec.id for r in loaded.rules][:5] == [
        "inline-1",
        "inline-2",
        "first-1",
        "first-2",
        "second-1",
    ]


def test_defaults_are_on_when_not_listed(tmp_path: Path) -> None:
    config = CONFIG.replace("  - builtin:http-defaults\n", "")
    loaded = load_config(str(_write(tmp_path, config)))
    assert [r.spec.id for r in loaded.rules if r.is_default] == _default_rule_ids()
    assert loaded.rules[-1].is_default


def test_defaults_false_drops_the_shipped_rules(tmp_path: Path) -> None:
    config = CONFIG.replace("  - builtin:http-defaults\n", "") + "defaults: false\n"
    loaded = load_config(str(_write(tmp_path, config)))
    assert [r.spec.id for r in loaded.rules] == [
        "inline-1",
        "inline-2",
        "first-1",
        "first-2",
        "second-1",
    ]
    assert not any(r.is_default for r in loaded.rules)


def test_defaults_false_keeps_an_explicitly_listed_default_pack_last(tmp_path: Path) -> None:
    loaded = load_config(str(_write(tmp_path, CONFIG + "defaults: false\n")))
    ids = [r.spec.id for r in loaded.rules]
    assert ids[:5] == ["inline-1", "inline-2", "first-1", "first-2", "second-1"]
    # Only the listed default pack: `defaults: false` leaves builtin:mcp-defaults out.
    assert ids[5:] == _default_rule_ids(("http-defaults",))


def test_a_listed_stack_pack_is_matched_where_listed_and_only_once(tmp_path: Path) -> None:
    """`include: [builtin:stripe]` puts Stripe's rules first; the other stack packs follow."""
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "include: [builtin:stripe]\nroutes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n",
        encoding="utf-8",
    )
    loaded = load_config(str(path))
    order = [name.removeprefix(BUILTIN_PREFIX) for name in loaded.packs[1:]]
    others = [name for name in SHAPE_PACKS if name != "stripe"]
    assert order == ["stripe", *others, *DEFAULT_PACKS]
    ids = [r.spec.id for r in loaded.rules]
    assert len(ids) == len(set(ids))


def test_defaults_false_turns_the_stack_packs_off_too(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "defaults: false\ninclude: [builtin:django]\n"
        "routes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n",
        encoding="utf-8",
    )
    loaded = load_config(str(path))
    assert {r.source.file for r in loaded.rules} == {"builtin:django"}


def test_minimal_config_is_one_route_and_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "min.yaml"
    path.write_text("routes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n", encoding="utf-8")
    loaded = load_config(str(path))
    assert loaded.config.listen == "127.0.0.1:8080"
    assert loaded.config.limits.error_body_bytes == 1 << 20
    assert [r.spec.id for r in loaded.rules] == _default_rule_ids(SHAPE_PACKS + DEFAULT_PACKS)
    assert loaded.commands == {}


def test_embedded_config_is_one_additive_route_with_the_shipped_rules() -> None:
    loaded = embedded_config("http://127.0.0.1:9000/")
    [route] = loaded.config.routes
    assert (route.prefix, route.upstream, route.mode) == (
        "/",
        "http://127.0.0.1:9000",
        Mode.ADDITIVE,
    )
    assert loaded.config.listen == "127.0.0.1:8080"
    assert [r.spec.id for r in loaded.rules] == _default_rule_ids(SHAPE_PACKS + DEFAULT_PACKS)
    fallbacks = {r.spec.id for r in loaded.rules if r.is_default}
    assert fallbacks == set(_default_rule_ids())  # the stack packs' matches are specific
    assert loaded.files == []  # nothing on disk to watch for reloads


def test_embedded_config_takes_a_listen_address() -> None:
    assert embedded_config("http://h:1", listen="0.0.0.0:9999").config.listen == "0.0.0.0:9999"


@pytest.mark.parametrize(
    ("upstream", "listen", "field"),
    [("ftp://h", "127.0.0.1:1", "routes[0].upstream"), ("http://h:1", "nowhere", "listen")],
    ids=["bad-upstream", "bad-listen"],
)
def test_embedded_config_refuses_bad_arguments(upstream: str, listen: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        embedded_config(upstream, listen)
    [problem] = info.value.problems
    assert (problem.file, problem.field) == ("<command line>", field)


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_pack_loads(tmp_path: Path, name: str) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"defaults: false\ninclude: [{BUILTIN_PREFIX}{name}]\n"
        "routes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n",
        encoding="utf-8",
    )
    loaded = load_config(str(path))
    pack = validate_model(RulePack, parse_yaml(builtin_text(name), name))
    assert pack.rules or pack.skills or pack.commands
    assert [r.spec.id for r in loaded.rules] == [r.id for r in pack.rules]
    assert all(r.source.file == f"{BUILTIN_PREFIX}{name}" for r in loaded.rules)
    assert all(r.source.line is not None for r in loaded.rules)


def test_an_included_file_moves_a_route_one_step(tmp_path: Path) -> None:
    """`route_modes:` in an included file (the console's drafts file) sets the route's mode
    after the main file's routes are read; the other routes keep theirs."""
    (tmp_path / "drafts.yaml").write_text("rules: []\nroute_modes:\n  legacy: additive\n")
    (tmp_path / "gateway.yaml").write_text(
        "include: [drafts.yaml]\nroutes:\n"
        "  - {name: legacy, prefix: /a, upstream: 'http://127.0.0.1:9000', mode: headers}\n"
        "  - {name: other, prefix: /b, upstream: 'http://127.0.0.1:9001', mode: headers}\n"
    )
    loaded = load_config(str(tmp_path / "gateway.yaml"))
    assert [(r.name, r.mode) for r in loaded.config.routes] == [
        ("legacy", Mode.ADDITIVE),
        ("other", Mode.HEADERS),
    ]
