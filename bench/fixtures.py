"""What the benchmark serves and how Mendpoint is configured for it.

The upstream is nginx answering fixed bodies (never the bottleneck). Mendpoint gets the
shipped default packs plus 50 realistic custom rules and a 20-skill catalog, and the error
workload is one that a custom rule deep in that list classifies and a skill repairs, so
classification, resolution and rendering all run on every error request.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

OK_PATH = "/v1/items/42"
ERROR_PATH = "/v1/csv/normalize"
BIG_PATH = "/v1/blob"
OK_BODY = json.dumps(
    {
        "id": 42,
        "name": "apple",
        "sku": "APL-0042",
        "price": {"amount": 129, "currency": "EUR"},
        "tags": ["fruit", "fresh", "organic"],
        "stock": 310,
        "updated_at": "2026-11-30T07:19:53Z",
    },
    separators=(",", ":"),
)
ERROR_STATUS = 400
ERROR_BODY = '{"error":"Row at line 2 has 4 columns, expected 3","status":400}'
BIG_BYTES = 10 * 1024 * 1024
API_KEY = "bench-key-reader"
API_KEY_HEADER = "X-Api-Key"
# The mix workload (`mix-32`): 95 successes to every 5 failures of five kinds, each a shape
# real APIs answer with: a 404, a 422 with a validation body, a 429 with Retry-After, a 503,
# and a transport fault (nginx's `return 444` closes the connection without an answer).
MIX_PREFIX = "/v1/mix"
MIX_FAILURES: tuple[tuple[str, int, str], ...] = (
    ("missing", 404, '{"error":"not_found","message":"No item with id 9999"}'),
    (
        "invalid",
        422,
        '{"detail":[{"loc":["body","quantity"],"msg":"value is not a valid integer",'
        '"type":"type_error.integer"}]}',
    ),
    ("limited", 429, '{"error":"rate_limited","message":"Too many requests"}'),
    ("unavailable", 503, '{"error":"unavailable","message":"Service is restarting"}'),
    ("reset", 444, ""),
)
MIX_SUCCESSES = 95
MIX_RETRY_AFTER_S = 2
MATCHING_RULE_INDEX = 45
CUSTOM_RULES = 50
SKILLS = 20

NGINX_CONF = """\
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path {root}/nginx-body;
    proxy_temp_path {root}/nginx-proxy;
    fastcgi_temp_path {root}/nginx-fastcgi;
    uwsgi_temp_path {root}/nginx-uwsgi;
    scgi_temp_path {root}/nginx-scgi;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        default_type application/json;
        location = {ok} {{ return 200 '{ok_body}'; }}
        location = {error} {{ return {error_status} '{error_body}'; }}
        location = {big} {{ default_type application/octet-stream; alias {root}/big.bin; }}
{mix}
    }}
}}
"""


def mix_paths() -> list[tuple[str, int]]:
    """(path, status nginx answers) of one mix cycle of 100 requests: each failure kind once,
    spread out, 19 successes before each (444: no answer at all)."""
    run = MIX_SUCCESSES // len(MIX_FAILURES)
    cycle: list[tuple[str, int]] = []
    for name, status, _ in MIX_FAILURES:
        cycle += [(OK_PATH, 200)] * run + [(f"{MIX_PREFIX}/{name}", status)]
    return cycle


def _mix_locations() -> str:
    lines = []
    for name, status, body in MIX_FAILURES:
        answer = f"return {status};" if not body else f"return {status} '{body}';"
        extra = f"add_header Retry-After {MIX_RETRY_AFTER_S} always; " if status == 429 else ""
        lines.append(f"        location = {MIX_PREFIX}/{name} {{ {extra}{answer} }}")
    return "\n".join(lines)


def write_nginx(root: Path, port: int) -> Path:
    """An nginx config (and the 10 MB file it serves) under `root`; returns the config path."""
    big = root / "big.bin"
    if not big.exists() or big.stat().st_size != BIG_BYTES:
        big.write_bytes(bytes(range(256)) * (BIG_BYTES // 256))
    conf = root / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            root=root,
            port=port,
            ok=OK_PATH,
            ok_body=OK_BODY,
            error=ERROR_PATH,
            error_status=ERROR_STATUS,
            error_body=ERROR_BODY,
            big=BIG_PATH,
            mix=_mix_locations(),
        )
    )
    return conf


# (resource, status, category, json path, regex, code, intent) — shapes seen in real APIs.
_SHAPES: tuple[tuple[str, int, str, str, str, str, str | None], ...] = (
    ("payments", 402, "VALIDATION_ERROR", "error.code", "card_declined", "CARD_DECLINED", None),
    ("orders", 409, "CONFLICT", "error.message", "(?i)version mismatch", "STALE_VERSION", None),
    ("users", 422, "VALIDATION_ERROR", "detail.0.msg", "(?P<msg>.+)", "FIELD_INVALID", None),
    (
        "files",
        413,
        "PAYLOAD_TOO_LARGE",
        "message",
        "exceeds (?P<max>\\d+)",
        "FILE_TOO_BIG",
        "chunk",
    ),
    ("search", 400, "VALIDATION_ERROR", "error", "(?i)invalid query", "BAD_QUERY", "query_fix"),
    ("reports", 400, "VALIDATION_ERROR", "message", "(?i)date range", "BAD_RANGE", None),
    ("tokens", 401, "AUTH_REQUIRED", "error_description", "expired", "TOKEN_EXPIRED", "reauth"),
    ("repos", 403, "PERMISSION_DENIED", "message", "(?i)must have push", "NO_PUSH", None),
    ("exports", 400, "VALIDATION_ERROR", "error.type", "invalid_format", "BAD_FORMAT", "format"),
    ("imports", 400, "VALIDATION_ERROR", "errors.0.detail", "(?i)encoding", "BAD_ENCODING", None),
)


def custom_rules() -> list[dict[str, object]]:
    """50 rules; the one the error workload hits sits at `MATCHING_RULE_INDEX`."""
    rules: list[dict[str, object]] = []
    for i in range(CUSTOM_RULES - 1):
        resource, status, category, path, pattern, code, intent = _SHAPES[i % len(_SHAPES)]
        error: dict[str, object] = {
            "code": f"{code}_{i}",
            "category": category,
            "fix_required": "Correct the request as the message describes, then reissue",
        }
        if intent:
            error["recovery_intent"] = f"{intent}_{i % 7}"
        rules.append(
            {
                "id": f"{resource}-{i}",
                "match": {
                    "status": [status],
                    "path": f"/v{1 + i % 3}/{resource}/**",
                    "json": {"path": path, "regex": pattern},
                },
                "error": error,
            }
        )
    rules.insert(MATCHING_RULE_INDEX, _csv_rule())
    return rules


def _csv_rule() -> dict[str, object]:
    return {
        "id": "csv-malformed",
        "match": {
            "status": [400],
            "path": "/v1/csv/**",
            "json": {
                "path": "error",
                "regex": "Row at line (?P<line>\\d+) has (?P<got>\\d+) columns, "
                "expected (?P<want>\\d+)",
            },
        },
        "error": {
            "code": "CSV_MALFORMED",
            "category": "VALIDATION_ERROR",
            "message": "Row {line} has {got} columns, expected {want}",
            "fix_required": "Make row {line} match the header's {want} columns, then reissue",
            "recovery_intent": "format_inspection",
        },
    }


def skills() -> list[dict[str, object]]:
    """20 skills; two repair the workload's intent (one in scope), the rest other intents."""
    repairs = ("inspect", "prepare", "normalize", "sanitize", "decompose", "enrich")
    out: list[dict[str, object]] = []
    for i in range(SKILLS - 2):
        out.append(
            {
                "name": f"tools.skill_{i}",
                "version": "1.0.0",
                "recovers": [f"query_fix_{i % 7}", f"chunk_{i % 7}"],
                "repair": repairs[i % len(repairs)],
                "purpose": f"Repair helper number {i} for the benchmark catalog.",
                "scopes": ["data:read"],
                "priority": 50 + i,
            }
        )
    out.append(
        {
            "name": "schema.infer_csv_schema",
            "version": "1.0.0",
            "recovers": ["format_inspection"],
            "repair": "inspect",
            "purpose": "Inspect the CSV structure and find malformed rows before retrying.",
            "scopes": ["data:read"],
            "priority": 10,
        }
    )
    out.append(
        {
            "name": "admin.rewrite_csv",
            "version": "2.0.0",
            "recovers": ["format_inspection"],
            "repair": "normalize",
            "purpose": "Rewrite the CSV with an administrator's tool.",
            "scopes": ["admin"],
            "priority": 5,
        }
    )
    return out


@dataclass(frozen=True)
class Variant:
    """What one Mendpoint system of the benchmark runs with: the shipped defaults (the JSON
    access log and follow-up tracking on) unless told otherwise. The `[log-off]` and
    `[log-off+followups-off]` columns measure what each costs; `fleet` (a redis:// URL) what
    a fleet store costs; `collector`, traces on, `sample_ratio` of them sampled, exported to
    that OTLP/HTTP collector (the tracing row)."""

    mode: str = "additive"
    access_log: bool = True
    followups: bool = True
    fleet: str | None = None
    collector: str | None = None
    sample_ratio: float = 1.0

    def suffix(self) -> str:
        """What tells this variant's config file from the others' of the same mode."""
        suffix = ("-log" if self.access_log else "") + ("" if self.followups else "-nofollowups")
        suffix += "-fleet" if self.fleet is not None else ""
        return suffix + ("" if self.collector is None else f"-traced-{self.sample_ratio:g}")


def mendpoint_config(upstream: str, variant: Variant) -> dict[str, object]:
    """The gateway config for one benchmark run (as data; written as JSON, which is YAML).
    No admin listener (nothing else to bind)."""
    key_hash = hashlib.sha256(API_KEY.encode()).hexdigest()
    telemetry: dict[str, object] = {}
    if variant.collector is not None:
        telemetry["otlp_endpoint"] = variant.collector
        telemetry["sample_ratio"] = variant.sample_ratio
    fleet = {"redis": variant.fleet, "key_file": FLEET_KEY_FILE}
    return ({"fleet": fleet} if variant.fleet is not None else {}) | {
        "telemetry": telemetry,
        "listen": "127.0.0.1:0",
        "admin": None,
        "log": {"level": "warning", "access": variant.access_log},
        "followups": {"enabled": variant.followups},
        "shutdown": {"drain_delay_s": 0, "grace_s": 5},
        "include": ["builtin:http-defaults"],
        "routes": [{"name": "api", "prefix": "/", "upstream": upstream, "mode": variant.mode}],
        "callers": {
            "header": API_KEY_HEADER,
            "keys": [{"name": "reader", "key": f"sha256:{key_hash}", "scopes": ["data:read"]}],
        },
        "resolver": {"budget_ms": 50, "max_options": 3},
        "skills": skills(),
        "rules": custom_rules(),
    }


FLEET_KEY_FILE = "fleet.key"
"""Next to the config files (relative paths are read against the config's folder)."""


def write_mendpoint_config(root: Path, upstream: str, variant: Variant) -> Path:
    if variant.fleet is not None and not (root / FLEET_KEY_FILE).exists():
        (root / FLEET_KEY_FILE).touch(mode=0o600)
        (root / FLEET_KEY_FILE).write_text(secrets.token_hex(32) + "\n")
    port = upstream.rsplit(":", 1)[-1].strip("/")
    path = root / f"mendpoint-{variant.mode}-{port}{variant.suffix()}.yaml"
    path.write_text(json.dumps(mendpoint_config(upstream, variant), indent=1))
    return path
