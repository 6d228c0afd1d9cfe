"""Every way a config or rule pack can be wrong is refused with `FILE:LINE: field: message`.

One table of bad configs (the class invariants of docs/spec.md, the rule and registry checks
of docs/rules.md, the config shape of docs/configuration.md), each written to a temporary
directory and loaded with `load_config`; the problem must name the exact file, line and field,
and say why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.config.errors import ConfigError
from gateway.config.loaded import LoadedConfig
from gateway.config.loader import load_config
from tests.support.secrets import write_secret

CONFIG = "gateway.yaml"
HEAD = "routes:\n  - name: api\n    upstream: http://127.0.0.1:9000\n"  # lines 1-3
FLEET = "fleet:\n  redis: redis://127.0.0.1:6379/0\n"  # lines 4-5
COMMANDS = "commands:\n  refresh: {run: tool auth refresh, idempotent: true}\n"


def rule(match: str, *error: str, after: str = "") -> str:
    """HEAD, then rule `r1`: `match` on line 6, `error` keys from line 8, then `after`."""
    body = "".join(f"      {line}\n" for line in error)
    return HEAD + f"rules:\n  - id: r1\n    match: {match}\n    error:\n{body}" + after


def command(run: str, *extra: str, before: str = "") -> str:
    """HEAD, `before`, then command `c` whose `run:` is on line 6 (plus `before`'s lines)."""
    lines = "".join(f"    {line}\n" for line in extra)
    return HEAD + before + f"commands:\n  c:\n    run: {json.dumps(run)}\n{lines}"


IDEMPOTENT = "idempotent: true"


@dataclass(frozen=True)
class Bad:
    """A config (and the files it includes) that must be refused with `where` and `phrase`."""

    text: str
    where: str  # "FILE:LINE" or "FILE:LINE: field", FILE relative to the temp dir
    phrase: str  # part of the message; @DIR@ stands for the temp dir
    files: dict[str, str] = field(default_factory=dict)


CASES: dict[str, Bad] = {
    # --- shape: unknown keys, enums, formats ------------------------------------------------
    "unknown-top-level-key": Bad(
        HEAD + "listn: 127.0.0.1:8080\n", "gateway.yaml:4: listn", "did you mean `listen`?"
    ),
    "unknown-route-key": Bad(
        HEAD + "    rollot: {percent: 10}\n",
        "gateway.yaml:4: routes[0].rollot",
        "unknown key: did you mean `rollout`?",
    ),
    "unknown-key-in-a-route-block": Bad(
        HEAD + "    rollout: {percnt: 10}\n",
        "gateway.yaml:4: routes[0].rollout.percnt",
        "unknown key: did you mean `percent`?",
    ),
    "unknown-key-in-a-json-condition": Bad(
        rule("{status: [400], json: {pth: error.code}}", "code: X", "category: NOT_FOUND"),
        "gateway.yaml:6: rules[0].match.json.pth",
        "unknown key: did you mean `path`?",
    ),
    "unknown-key-in-a-list-of-json-conditions": Bad(
        rule("{status: [400], json: [{pth: error.code}]}", "code: X", "category: NOT_FOUND"),
        "gateway.yaml:6: rules[0].match.json[0].pth",
        "unknown key: did you mean `path`?",
    ),
    "unknown-key-nothing-near": Bad(
        HEAD + "zzqx: 1\n",
        "gateway.yaml:4: zzqx",
        "unknown key (check the spelling; see the config reference)",
    ),
    "unknown-rule-key-typo": Bad(
        rule(
            "{status: [401]}",
            "code: X",
            "category: AUTH_REQUIRED",
            "fix_required: log in",
            "fix_comand: refresh",
            after=COMMANDS,
        ),
        "gateway.yaml:11: rules[0].error.fix_comand",
        "unknown key: did you mean `fix_command`?",
    ),
    "unknown-match-key": Bad(
        rule("{status: [400], stauts: [401]}", "code: X", "category: VALIDATION_ERROR"),
        "gateway.yaml:6: rules[0].match.stauts",
        "unknown key: did you mean `status`?",
    ),
    "unknown-category": Bad(
        rule("{status: [400]}", "code: X", "category: BROKEN"),
        "gateway.yaml:9: rules[0].error.category",
        "'VALIDATION_ERROR'",
    ),
    "code-not-upper-snake": Bad(
        rule("{status: [400]}", "code: bad_request", "category: VALIDATION_ERROR"),
        "gateway.yaml:8: rules[0].error.code",
        "UPPER_SNAKE",
    ),
    "unknown-method": Bad(
        rule("{status: [400], methods: [FETCH]}", "code: X", "category: VALIDATION_ERROR"),
        "gateway.yaml:6: rules[0].match.methods",
        "unknown HTTP method",
    ),
    "recovery-intent-format": Bad(
        rule(
            "{status: [400]}",
            "code: X",
            "category: VALIDATION_ERROR",
            "fix_required: fix it",
            "recovery_intent: Format Inspection",
        ),
        "gateway.yaml:11: rules[0].error.recovery_intent",
        "lower-case identifier",
    ),
    "missing-routes": Bad("listen: 127.0.0.1:8080\n", "gateway.yaml:1: routes", "Field required"),
    "bad-listen-no-port": Bad(HEAD + "listen: localhost\n", "gateway.yaml:4: listen", "HOST:PORT"),
    "bad-listen-port-range": Bad(
        HEAD + "listen: 127.0.0.1:99999\n", "gateway.yaml:4: listen", "HOST:PORT"
    ),
    "bad-upstream-scheme": Bad(
        "routes:\n  - name: api\n    upstream: ftp://example.com\n",
        "gateway.yaml:3: routes[0].upstream",
        "http:// or https:// URL",
    ),
    "bad-upstream-no-host": Bad(
        "routes:\n  - name: api\n    upstream: http://\n",
        "gateway.yaml:3: routes[0].upstream",
        "http:// or https:// URL",
    ),
    "top-level-sequence": Bad(
        "- routes\n- rules\n", "gateway.yaml:1", "top level must be a mapping"
    ),
    "top-level-scalar": Bad("just some text\n", "gateway.yaml:1", "top level must be a mapping"),
    # --- regexes and status specs ---------------------------------------------------------
    "bad-regex-body": Bad(
        rule('{status: [400], body: "(unclosed"}', "code: X", "category: UPSTREAM_ERROR"),
        "gateway.yaml:6: rules[0].match.body",
        "invalid regex '(unclosed'",
    ),
    "bad-regex-json": Bad(
        rule(
            '{status: [400], json: {path: error.message, regex: "[a-"}}',
            "code: X",
            "category: UPSTREAM_ERROR",
        ),
        "gateway.yaml:6: rules[0].match.json.regex",
        "invalid regex '[a-'",
    ),
    "bad-regex-header": Bad(
        HEAD + "rules:\n  - id: r1\n    match:\n      status: [400]\n      headers:\n"
        '        content-type: "(?P<x"\n'
        "    error: {code: X, category: UPSTREAM_ERROR}\n",
        "gateway.yaml:9: rules[0].match.headers.content-type",
        "invalid regex",
    ),
    "status-6xx": Bad(
        rule('{status: ["6xx"]}', "code: X", "category: UPSTREAM_ERROR"),
        "gateway.yaml:6: rules[0].match.status[0]",
        "within 100-599",
    ),
    "status-abc": Bad(
        rule('{status: [400, "abc"]}', "code: X", "category: UPSTREAM_ERROR"),
        "gateway.yaml:6: rules[0].match.status[1]",
        "is not a status, 'Nxx' class or 'LOW-HIGH' range",
    ),
    "status-reversed-range": Bad(
        rule('{status: ["500-400"]}', "code: X", "category: UPSTREAM_ERROR"),
        "gateway.yaml:6: rules[0].match.status[0]",
        "LOW <= HIGH",
    ),
    "transport-with-status": Bad(
        rule("{transport: [reset], status: [500]}", "code: X", "category: UNAVAILABLE"),
        "gateway.yaml:6: rules[0].match.transport",
        "cannot also match status",
    ),
    "body-and-json": Bad(
        rule('{status: [400], body: "x", json: {path: a}}', "code: X", "category: UPSTREAM_ERROR"),
        "gateway.yaml:6: rules[0].match.body",
        "either body or json",
    ),
    "placeholder-without-capture": Bad(
        rule(
            r"{status: [400], body: 'row (?P<row>\d+)'}",
            "code: X",
            "category: VALIDATION_ERROR",
            'message: "bad line {line} (status {status})"',
        ),
        "gateway.yaml:10: rules[0].error.message",
        "['line'] match no named capture",
    ),
    "fix-required-placeholder-without-capture": Bad(
        rule(
            r"{status: [400], body: 'row (?P<row>\d+)'}",
            "code: X",
            "category: VALIDATION_ERROR",
            'fix_required: "fix row {row}, column {col}"',
        ),
        "gateway.yaml:10: rules[0].error.fix_required",
        "['col'] match no named capture",
    ),
    # --- docs/spec.md, Classes: one class per failure ----------------------------------------
    "fix-command-unknown-id": Bad(
        rule(
            "{status: [401]}",
            "code: X",
            "category: AUTH_REQUIRED",
            "fix_required: log in",
            "fix_command: tool auth refresh",
            after=COMMANDS,
        ),
        "gateway.yaml:11: rules[0].error.fix_command",
        "'tool auth refresh' is not a registry id (commands: refresh)",
    ),
    "fix-command-without-fix-required": Bad(
        rule(
            "{status: [401]}",
            "code: X",
            "category: AUTH_REQUIRED",
            "fix_command: refresh",
            after=COMMANDS,
        ),
        "gateway.yaml:10: rules[0].error.fix_command",
        "fix_command without fix_required",
    ),
    "retryable-with-fix-required": Bad(
        rule(
            "{status: [503], methods: [GET]}",
            "code: X",
            "category: UNAVAILABLE",
            "retryable: true",
            "fix_required: wait",
        ),
        "gateway.yaml:10: rules[0].error.retryable",
        "a retryable failure has no fix fields",
    ),
    "retry-after-not-retryable": Bad(
        rule(
            "{status: [503]}",
            "code: X",
            "category: UNAVAILABLE",
            "retryable: false",
            "retry_after_ms: 1000",
        ),
        "gateway.yaml:11: rules[0].error.retry_after_ms",
        "only for retryable: true",
    ),
    "retry-after-default-not-retryable": Bad(
        rule(
            "{status: [503]}",
            "code: X",
            "category: UNAVAILABLE",
            "retry_after_ms: {header: Retry-After}",
        ),
        "gateway.yaml:10: rules[0].error.retry_after_ms",
        "only for retryable: true",
    ),
    "retry-after-capture-unknown": Bad(
        rule(
            "{mcp: {}, body: 'retry after (?P<delay>\\d+)'}",
            "code: X",
            "category: RATE_LIMITED",
            "retryable: true",
            "side_effect_free: true",
            "retry_after_ms: {capture: wait}",
        ),
        "gateway.yaml:12: rules[0].error.retry_after_ms.capture",
        "'wait' is not a named capture",
    ),
    "retryable-status-any-method": Bad(
        rule("{status: [503]}", "code: X", "category: UNAVAILABLE", "retryable: true"),
        "gateway.yaml:10: rules[0].error.retryable",
        "can match a POST or PATCH",
    ),
    "retryable-status-with-patch": Bad(
        rule(
            "{status: [500], methods: [GET, PATCH]}",
            "code: X",
            "category: UPSTREAM_ERROR",
            "retryable: true",
        ),
        "gateway.yaml:10: rules[0].error.retryable",
        "can match a POST or PATCH",
    ),
    "retryable-read-timeout": Bad(
        rule("{transport: [read_timeout]}", "code: X", "category: TIMEOUT", "retryable: true"),
        "gateway.yaml:10: rules[0].error.retryable",
        "can match a POST or PATCH",
    ),
    "retryable-refused-or-reset": Bad(
        rule(
            "{transport: [connect_refused, reset]}",
            "code: X",
            "category: UNAVAILABLE",
            "retryable: true",
        ),
        "gateway.yaml:10: rules[0].error.retryable",
        "can match a POST or PATCH",
    ),
    "retryable-mcp-error": Bad(
        rule("{mcp: {tool: 'data.*'}}", "code: X", "category: UPSTREAM_ERROR", "retryable: true"),
        "gateway.yaml:10: rules[0].error.retryable",
        "can match a POST or PATCH",
    ),
    # --- the fix_command registry ------------------------------------------------------------
    "command-placeholder-angle": Bad(
        command("tool login <token>", IDEMPOTENT), "gateway.yaml:6: commands.c", "placeholder"
    ),
    "command-placeholder-brace": Bad(
        command("tool login {x}", IDEMPOTENT), "gateway.yaml:6: commands.c", "placeholder"
    ),
    "command-placeholder-env": Bad(
        command("tool login $HOME", IDEMPOTENT), "gateway.yaml:6: commands.c", "placeholder"
    ),
    "command-pipe": Bad(
        command("tool status | tee out", IDEMPOTENT),
        "gateway.yaml:6: commands.c",
        "shell syntax ['|']",
    ),
    "command-semicolon": Bad(
        command("tool a; tool b", IDEMPOTENT), "gateway.yaml:6: commands.c", "shell syntax [';']"
    ),
    "command-and-and": Bad(
        command("tool a && tool b", IDEMPOTENT), "gateway.yaml:6: commands.c", "shell syntax ['&']"
    ),
    "command-redirect-out": Bad(
        command("tool a > out.txt", IDEMPOTENT), "gateway.yaml:6: commands.c", "shell syntax ['>']"
    ),
    "command-redirect-in": Bad(
        command("tool a < in.txt", IDEMPOTENT), "gateway.yaml:6: commands.c", "shell syntax ['<']"
    ),
    "command-backticks": Bad(
        command("tool login `id -u`", IDEMPOTENT),
        "gateway.yaml:6: commands.c",
        "shell syntax ['`']",
    ),
    "command-substitution": Bad(
        command("tool login $(id -u)", IDEMPOTENT),
        "gateway.yaml:6: commands.c",
        "shell syntax ['$(']",
    ),
    "command-newline": Bad(
        command("tool a\ntool b", IDEMPOTENT), "gateway.yaml:6: commands.c", "one line"
    ),
    "command-unbalanced-quote": Bad(
        command('tool "a', IDEMPOTENT), "gateway.yaml:6: commands.c", "cannot be split"
    ),
    "command-destructive": Bad(
        command("tool cache purge", IDEMPOTENT, "destructive: true"),
        "gateway.yaml:6: commands.c",
        "is declared destructive",
    ),
    "command-not-idempotent": Bad(
        command("tool auth refresh"), "gateway.yaml:6: commands.c", "not declared idempotent"
    ),
    "command-idempotent-false": Bad(
        command("tool auth refresh", "idempotent: false"),
        "gateway.yaml:6: commands.c",
        "not declared idempotent",
    ),
    "command-not-a-companion": Bad(
        command("tool auth refresh", IDEMPOTENT, before="companions: [other-cli]\n"),
        "gateway.yaml:7: commands.c",
        "runs 'tool', which is not in the declared companions",
    ),
    "command-not-a-companion-of-pack": Bad(
        HEAD + "include: [pack.yaml]\n",
        "pack.yaml:3: commands.c",
        "runs 'tool', which is not in the declared companions",
        files={
            "pack.yaml": "companions: [other-cli]\n"
            "commands:\n  c: {run: tool a, idempotent: true}\n"
        },
    ),
    # --- ids, names and routes across the whole config ----------------------------------------
    "duplicate-rule-id-across-files": Bad(
        HEAD + "include: [pack.yaml]\nrules:\n  - id: dup\n    match: {status: [500]}\n"
        "    error: {code: X, category: UPSTREAM_ERROR}\n",
        "pack.yaml:5: rules[1].id",
        "duplicate rule id 'dup' (first at @DIR@/gateway.yaml:6)",
        files={
            "pack.yaml": "rules:\n"
            "  - id: other\n    match: {status: [502]}\n"
            "    error: {code: Y, category: UNAVAILABLE}\n"
            "  - id: dup\n    match: {status: [503]}\n"
            "    error: {code: Z, category: UNAVAILABLE}\n"
        },
    ),
    "duplicate-command-id": Bad(
        HEAD + "include: [pack.yaml]\ncommands:\n  c: {run: tool a, idempotent: true}\n",
        "pack.yaml:3: commands.c",
        "command id already defined at @DIR@/gateway.yaml:6",
        files={
            "pack.yaml": "# the same id again\ncommands:\n  c: {run: tool b, idempotent: true}\n"
        },
    ),
    "unknown-route-in-match": Bad(
        rule("{routes: [api, nope], status: [400]}", "code: X", "category: UPSTREAM_ERROR"),
        "gateway.yaml:6: rules[0].match.routes[1]",
        "no route is named 'nope'",
    ),
    "duplicate-route-name": Bad(
        HEAD + "  - name: api\n    prefix: /v2\n    upstream: http://127.0.0.1:9001\n",
        "gateway.yaml:4: routes[1].name",
        "duplicate route name 'api'",
    ),
    "duplicate-route-prefix": Bad(
        HEAD + "  - name: other\n    upstream: http://127.0.0.1:9001\n",
        "gateway.yaml:4: routes[1].prefix",
        "another route already has prefix '/'",
    ),
    "duplicate-route-prefix-explicit": Bad(
        HEAD + "  - name: other\n    upstream: http://127.0.0.1:9001\n    prefix: /\n",
        "gateway.yaml:6: routes[1].prefix",
        "another route already has prefix '/'",
    ),
    "duplicate-route-prefix-in-another-case": Bad(
        HEAD.replace("api", "v2") + "    prefix: /V2\n"
        "  - name: other\n    upstream: http://127.0.0.1:9001\n    prefix: /v2/\n",
        "gateway.yaml:7: routes[1].prefix",
        "another route already has prefix '/V2' ('/v2/' matches the same paths",
    ),
    "route-prefix-with-dot-segment": Bad(
        HEAD + "    prefix: /v1/../admin\n",
        "gateway.yaml:4: routes[0].prefix",
        "must be a plain path",
    ),
    "route-prefix-with-encoded-slash": Bad(
        HEAD + "    prefix: /a%2Fb\n",
        "gateway.yaml:4: routes[0].prefix",
        "no %-escapes",
    ),
    "route-prefix-with-empty-segment": Bad(
        HEAD + "    prefix: //admin\n",
        "gateway.yaml:4: routes[0].prefix",
        "single slashes",
    ),
    "route-prefix-with-parameter": Bad(
        HEAD + "    prefix: /api;v=1\n",
        "gateway.yaml:4: routes[0].prefix",
        "must be a plain path",
    ),
    "route-path-unknown-escaped-slashes": Bad(
        HEAD + "    path: {escaped_slashes: unescape}\n",
        "gateway.yaml:4: routes[0].path.escaped_slashes",
        "'keep', 'refuse' or 'decode'",
    ),
    "duplicate-route-name-not-first-key": Bad(
        HEAD + "  - prefix: /v2\n    name: api\n    upstream: http://127.0.0.1:9001\n",
        "gateway.yaml:5: routes[1].name",
        "duplicate route name 'api'",
    ),
    # --- YAML itself ---------------------------------------------------------------------------
    "yaml-duplicate-key": Bad(
        rule(
            "{status: [401]}",
            "code: X",
            "category: AUTH_REQUIRED",
            "fix_required: log in",
            "fix_command: refresh",
            "fix_command: other",
            after=COMMANDS,
        ),
        "gateway.yaml:12: rules[0].error.fix_command",
        "duplicate key (first defined on line 11)",
    ),
    "yaml-anchor": Bad(
        HEAD + "listen: &l 127.0.0.1:8080\n", "gateway.yaml:4", "anchors and aliases"
    ),
    "yaml-anchor-and-alias": Bad(
        HEAD + "rules:\n  - &r {id: a, match: {status: [500]}, error: {code: X, category: "
        "UPSTREAM_ERROR}}\n  - *r\n",
        "gateway.yaml:5",
        "anchors and aliases are not allowed",
    ),
    "yaml-syntax": Bad(HEAD + "rules: [\n  - id: r1\n", "gateway.yaml:5", "invalid YAML"),
    "yaml-tab-indent": Bad(HEAD + "listen:\n\t127.0.0.1:8080\n", "gateway.yaml:5", "invalid YAML"),
    "yaml-bad-tag": Bad(
        HEAD + "enrich_budget_ms: !!int soon\n", "gateway.yaml:4: enrich_budget_ms", "invalid value"
    ),
    # --- route_modes: a route's mode moved one step by an included file ----------------------
    "route-modes-unknown-route": Bad(
        HEAD + "include: [drafts.yaml]\n",
        "drafts.yaml:3: route_modes.apii",
        "no route of the main config is named 'apii' (routes: api)",
        files={"drafts.yaml": "rules: []\nroute_modes:\n  apii: envelope\n"},
    ),
    "route-modes-two-steps": Bad(
        HEAD + "    mode: headers\ninclude: [drafts.yaml]\n",
        "drafts.yaml:2: route_modes.api",
        "route 'api' is in mode headers in the main config: an included file moves it one "
        "step at most (headers or additive), not to envelope",
        files={"drafts.yaml": "route_modes:\n  api: envelope\n"},
    ),
    "route-modes-a-step-back": Bad(
        HEAD + "include: [drafts.yaml]\n",
        "drafts.yaml:2: route_modes.api",
        "is in mode additive in the main config: an included file moves it one step at most "
        "(additive or envelope), not to headers",
        files={"drafts.yaml": "route_modes:\n  api: headers\n"},
    ),
    "route-modes-moved-by-two-files": Bad(
        HEAD + "include: [a.yaml, b.yaml]\n",
        "b.yaml:2: route_modes.api",
        "route 'api' is already moved by @DIR@/a.yaml:2",
        files={
            "a.yaml": "route_modes:\n  api: envelope\n",
            "b.yaml": "route_modes:\n  api: envelope\n",
        },
    ),
    "route-modes-not-a-mode": Bad(
        HEAD + "include: [drafts.yaml]\n",
        "drafts.yaml:2: route_modes.api",
        "'additive'",
        files={"drafts.yaml": "route_modes:\n  api: additve\n"},
    ),
    # --- includes ------------------------------------------------------------------------------
    "include-missing-file": Bad(
        HEAD + "include:\n  - builtin:http-defaults\n  - missing.yaml\n",
        "gateway.yaml:6: include[1]",
        "@DIR@/missing.yaml: cannot read",
    ),
    "include-unknown-builtin": Bad(
        HEAD + "include:\n  - builtin:nope\n",
        "gateway.yaml:5: include[0]",
        "unknown pack 'builtin:nope'; the builtin packs are builtin:",
    ),
    "include-listed-twice": Bad(
        HEAD + "include:\n  - pack.yaml\n  - pack.yaml\n",
        "gateway.yaml:6: include[1]",
        "listed twice",
        files={"pack.yaml": "rules: []\n"},
    ),
    "include-directory": Bad(
        HEAD + "include: [sub]\n", "gateway.yaml:4: include[0]", "cannot read", files={"sub/x": ""}
    ),
    "pack-unknown-key": Bad(
        HEAD + "include: [pack.yaml]\n",
        "pack.yaml:2: rulez",
        "unknown key: did you mean `rules`?",
        files={"pack.yaml": "# a pack\nrulez: []\n"},
    ),
    "pack-bad-regex": Bad(
        HEAD + "include: [pack.yaml]\n",
        "pack.yaml:3: rules[0].match.body",
        "invalid regex",
        files={
            "pack.yaml": "rules:\n  - id: p1\n    match: {status: [400], body: '(?<'}\n"
            "    error: {code: X, category: VALIDATION_ERROR}\n"
        },
    ),
    "pack-yaml-syntax": Bad(
        HEAD + "include: [pack.yaml]\n",
        "pack.yaml:2",
        "invalid YAML",
        files={"pack.yaml": "rules:\n  - id: a: b\n"},
    ),
    # --- fleet (docs/configuration.md#fleet) ---------------------------------------------
    "fleet-password-in-url": Bad(
        HEAD + "fleet:\n  redis: redis://user:hunter2@127.0.0.1:6379/0\n",
        "gateway.yaml:5: fleet.redis",
        "password_file",
    ),
    "fleet-without-a-key": Bad(
        HEAD + FLEET,
        "gateway.yaml:4: fleet",
        "key_file is required: it signs what replicas share",
    ),
    "fleet-key-file-missing": Bad(
        HEAD + FLEET + "  key_file: none.key\n",
        "gateway.yaml:6: fleet.key_file",
        "cannot read @DIR@/none.key",
    ),
    "fleet-not-a-redis-url": Bad(
        HEAD + "fleet:\n  redis: http://127.0.0.1:6379\n", "gateway.yaml:5: fleet.redis", ""
    ),
    "fleet-unknown-key": Bad(
        HEAD + "fleet:\n  redis: redis://127.0.0.1:6379/0\n  pasword_file: p\n",
        "gateway.yaml:6: fleet.pasword_file",
        "",
    ),
    "fleet-tls-without-rediss": Bad(
        HEAD + "fleet:\n  redis: redis://127.0.0.1:6379/0\n  tls: {insecure: true}\n"
        "  key_file: k.key\n",
        "gateway.yaml:4: fleet",
        "rediss://",
    ),
    "fleet-missing-password-file": Bad(
        HEAD + "fleet:\n  redis: redis://127.0.0.1:6379/0\n  password_file: nope.txt\n"
        "  key_file: k.key\n",
        "gateway.yaml:6: fleet.password_file",
        "cannot read @DIR@/nope.txt",
    ),
    "fleet-bad-timeout": Bad(
        HEAD + "fleet:\n  redis: redis://127.0.0.1:6379/0\n  timeout_ms: 0\n",
        "gateway.yaml:6: fleet.timeout_ms",
        "",
    ),
    "fleet-tls-file-unreadable": Bad(
        HEAD + "fleet:\n  redis: rediss://127.0.0.1:6380/0\n  tls: {ca_file: none.pem}\n"
        "  key_file: k.key\n",
        "gateway.yaml:6: fleet.tls",
        "cannot read a TLS file",
    ),
    "fleet-sessions-missing-key-file": Bad(
        HEAD + FLEET + "  sessions:\n    key_file: none.key\n    listen: 127.0.0.1:8492\n",
        "gateway.yaml:7: fleet.sessions.key_file",
        "cannot read @DIR@/none.key",
    ),
    "fleet-sessions-short-key": Bad(
        HEAD + FLEET + "  sessions:\n    key_file: short.key\n    listen: 127.0.0.1:8492\n",
        "gateway.yaml:7: fleet.sessions.key_file",
        "key 2 is shorter than 32 characters",
        files={"short.key": "a" * 40 + "\n" + "b" * 20 + "\n"},
    ),
    "fleet-sessions-bad-listen": Bad(
        HEAD + FLEET + "  sessions:\n    key_file: k.key\n    listen: nowhere\n",
        "gateway.yaml:8: fleet.sessions.listen",
        "HOST:PORT",
        files={"k.key": "a" * 40 + "\n"},
    ),
    "fleet-sessions-wildcard-advertise": Bad(
        HEAD
        + FLEET
        + "  sessions:\n    key_file: k.key\n    listen: 0.0.0.0:8492\n"
        + "    advertise: 0.0.0.0:8492\n",
        "gateway.yaml:9: fleet.sessions.advertise",
        "other replicas can reach",
        files={"k.key": "a" * 40 + "\n"},
    ),
    "fleet-sessions-without-listen": Bad(
        HEAD + FLEET + "  sessions:\n    key_file: k.key\n",
        "gateway.yaml:6: fleet.sessions.listen",
        "Field required",
        files={"k.key": "a" * 40 + "\n"},
    ),
    "pack-top-level-sequence": Bad(
        HEAD + "include: [pack.yaml]\n",
        "pack.yaml:1",
        "top level must be a mapping",
        files={"pack.yaml": "- id: r1\n"},
    ),
}


def _write(tmp_path: Path, case: Bad) -> str:
    for name, text in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_secret(path, text)  # as a token or key file must be: the owner's alone
    config = tmp_path / CONFIG
    config.write_text(case.text, encoding="utf-8")
    return str(config)


def _refused(path: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_config_is_refused_with_file_line_and_field(tmp_path: Path, case: Bad) -> None:
    error = _refused(_write(tmp_path, case))
    where = f"{tmp_path}/{case.where}:"
    phrase = case.phrase.replace("@DIR@", str(tmp_path))
    rendered = [str(problem) for problem in error.problems]
    assert any(p.startswith(where) and phrase in p[len(where) :] for p in rendered), rendered
    line_shape = re.compile(rf"^{re.escape(str(tmp_path))}/[\w./-]+:\d+: \S")
    for line in str(error).splitlines():
        assert line_shape.match(line), line
    assert len(str(error).splitlines()) == len(error.problems)


def test_duplicate_key_is_an_error_not_an_override(tmp_path: Path) -> None:
    """The second `fix_command:` must not silently replace the first."""
    error = _refused(_write(tmp_path, CASES["yaml-duplicate-key"]))
    assert len(error.problems) == 1
    assert error.problems[0].line == 12


GOOD: dict[str, str] = {
    "retryable-side-effect-free": rule(
        "{status: [503]}",
        "code: X",
        "category: UNAVAILABLE",
        "retryable: true",
        "retry_after_ms: {header: Retry-After, default: 1000}",
        "side_effect_free: true",
    ),
    "retryable-get-only": rule(
        "{status: [503], methods: [GET]}", "code: X", "category: UNAVAILABLE", "retryable: true"
    ),
    "retryable-idempotent-methods": rule(
        "{status: ['5xx'], methods: [get, head, put, delete]}",
        "code: X",
        "category: UNAVAILABLE",
        "retryable: true",
        "retry_after_ms: 500",
    ),
    "retryable-connect-refused": rule(
        "{transport: [connect_refused]}", "code: X", "category: UNAVAILABLE", "retryable: true"
    ),
    "retryable-nothing-sent-post": rule(
        "{transport: [connect_refused, dns_failure, connect_timeout], methods: [POST]}",
        "code: X",
        "category: UNAVAILABLE",
        "retryable: true",
    ),
    "correctable-with-command": rule(
        "{status: [401]}",
        "code: X",
        "category: AUTH_REQUIRED",
        "fix_required: refresh the token",
        "fix_command: refresh",
        after=COMMANDS + "companions: [tool]\n",
    ),
    "placeholders-with-captures": rule(
        r"{status: [400], body: 'row (?P<row>\d+)'}",
        "code: X",
        "category: VALIDATION_ERROR",
        'message: "{method} {path} got {status}: row {row} {{literal}}"',
        'fix_required: "fix row {row}"',
    ),
    "status-forms": rule(
        "{status: [404, '4xx', '500-504', ' 502 ']}", "code: X", "category: UPSTREAM_ERROR"
    ),
}


@pytest.mark.parametrize("text", list(GOOD.values()), ids=list(GOOD))
def test_valid_rules_are_accepted(tmp_path: Path, text: str) -> None:
    loaded: LoadedConfig = load_config(_write(tmp_path, Bad(text, "", "")))
    first = loaded.rules[0]
    assert first.spec.id == "r1"
    assert first.source.file == str(tmp_path / CONFIG)
    assert first.source.line == 5
    assert not first.is_default


def test_many_problems_are_reported_at_once(tmp_path: Path) -> None:
    text = (
        HEAD
        + "rules:\n"
        + "  - id: a\n    match: {status: ['6xx'], body: '('}\n"  # 5, 6
        + "    error: {code: X, category: UNAVAILABLE, retryable: true}\n"  # 7
        + "  - id: b\n    match: {routes: [nope]}\n"  # 8, 9
        + "    error: {code: Y, category: AUTH_REQUIRED, fix_command: missing}\n"  # 10
    )
    error = _refused(_write(tmp_path, Bad(text, "", "")))
    assert len(error.problems) >= 2
    fields = {(p.line, p.field) for p in error.problems}
    assert {
        (6, "rules[0].match.body"),
        (6, "rules[0].match.status[0]"),
        (7, "rules[0].error.retryable"),
        (9, "rules[1].match.routes[0]"),
        (10, "rules[1].error.fix_command"),
    } <= fields


def test_many_shape_problems_are_reported_at_once(tmp_path: Path) -> None:
    text = "listen: nowhere\nroutes:\n  - name: api\n    upstream: ftp://x\n    colour: red\n"
    error = _refused(_write(tmp_path, Bad(text, "", "")))
    assert sorted((p.line, p.field) for p in error.problems) == [
        (1, "listen"),
        (4, "routes[0].upstream"),
        (5, "routes[0].colour"),
    ]


def test_missing_config_file_names_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.yaml")
    error = _refused(path)
    assert str(error) == f"{path}: cannot read: No such file or directory"


def test_non_utf8_config_is_refused(tmp_path: Path) -> None:
    path = tmp_path / CONFIG
    path.write_bytes(HEAD.encode() + b"listen: \xff\n")
    error = _refused(str(path))
    line = HEAD.count("\n") + 1  # the line holding the bad byte
    assert str(error).startswith(f"{path}:{line}: not UTF-8 text")
