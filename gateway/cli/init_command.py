"""`mendpoint init --upstream URL [--openapi FILE_OR_URL] [--out FILE]` (docs/rules.md)."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from gateway.config.loader import builtin_names
from gateway.offline.draft_save import HEADER as DRAFTS_HEADER
from gateway.offline.openapi import ApiDocument, OpenApiError, load
from gateway.offline.probe import probe
from gateway.offline.starter import DRAFTS_FILE, TOKEN_FILE, Loop, build, render_fixtures
from gateway.offline.yaml_writer import Mapping, Sequence, emit

# Where frameworks serve their document when nobody says, tried in this order: FastAPI,
# Litestar's OpenAPIController (`/schema/openapi.json`), Django Ninja mounted at `api/`,
# drf-spectacular's default URL conf, springdoc and springfox, ASP.NET Core (Swashbuckle's
# `/swagger/v1/swagger.json`, .NET 9's `/openapi/v1.json`), Quarkus's SmallRye (`/q/openapi`),
# swaggo (`/swagger/doc.json`), and the common static names.
WELL_KNOWN = (
    "/openapi.json",
    "/schema/openapi.json",
    "/api/openapi.json",
    "/api/schema/",
    "/v3/api-docs",
    "/v2/api-docs",
    "/swagger/v1/swagger.json",
    "/openapi/v1.json",
    "/q/openapi",
    "/swagger/doc.json",
    "/openapi.yaml",
    "/swagger.json",
    "/api-docs",
)
EXIT_OK, EXIT_INVALID = 0, 1


def run_init(upstream: str, openapi: str | None, out: str, force: bool) -> int:
    target = Path(out)
    fixtures_path = target.with_name(target.stem + ".fixtures.yaml")
    if not force and (target.exists() or fixtures_path.exists()):
        print(
            f"mendpoint init: {target} or {fixtures_path} exists; --force replaces it",
            file=sys.stderr,
        )
        return EXIT_INVALID
    document, source = _document(upstream, openapi)
    if openapi is not None and document is None:
        return EXIT_INVALID
    answer = probe(upstream)
    captures = str(target.parent.resolve() / "captures")
    loop = Loop(captures=captures, token_file=TOKEN_FILE, drafts_file=DRAFTS_FILE)
    starter = build(upstream, document, source, answer, builtin_names(), loop=loop)
    target.write_text(starter.config)
    print(f"wrote {target}: 1 route, {len(starter.rules)} rule(s) from the document", end="")
    print(f", packs: {', '.join(starter.packs) or 'the shipped fallbacks only'}")
    token = target.with_name(TOKEN_FILE)
    print(_write_token(token))
    print(_write_drafts(target.with_name(DRAFTS_FILE)))
    if starter.fixtures:
        fixtures_path.write_text(render_fixtures(starter, target.name, fixtures_path.name))
        print(f"wrote {fixtures_path}: {len(starter.fixtures)} case(s)")
    if answer.status is None:
        print(f"note: the upstream did not answer the probe ({answer.evidence})")
    print(f"next: mendpoint check --config {target}")
    return EXIT_OK


def _document(upstream: str, openapi: str | None) -> tuple[ApiDocument | None, str | None]:
    """The document named, or the first one served at a well-known path; None if none."""
    if openapi is not None:
        try:
            return load(openapi), openapi
        except OpenApiError as exc:
            print(f"mendpoint init: {exc}", file=sys.stderr)
            return None, None
    for path in WELL_KNOWN:
        url = upstream.rstrip("/") + path
        try:
            return load(url, timeout_s=5), url
        except OpenApiError:
            continue
    print("note: no OpenAPI document found (give one with --openapi FILE_OR_URL)")
    return None, None


def _write_drafts(path: Path) -> str:
    """The console's drafts file, `rules: []`; one already there is kept (it holds the rules
    the console saved)."""
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(emit(Mapping().add("rules", Sequence([])), DRAFTS_HEADER))
    except FileExistsError:
        return f"kept {path}: the rules the console saved"
    return f"wrote {path}: where the console saves tried rules (console.drafts_file)"


def _write_token(path: Path) -> str:
    """The admin token file, mode 0600 from its first byte; one already there is kept (its
    clients have it)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return f"kept {path}: the admin token already there"
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    return f"wrote {path}: the admin token (mode 0600), for mendpoint gaps and suggest"
