"""Every body the gateway writes is strict JSON (docs/security.md#redaction).

Real aiohttp upstreams answer with bodies Python's json module reads leniently (`1e400` as
inf, `NaN`, a 5000-digit integer, a lone surrogate escape, a repeated name); a gateway in each
mode answers a real client, and Node's JSON.parse, a strict parser, reads every answer. The
envelope's `meta.original` keeps the upstream's own numbers as they were written, and in
`additive` mode the upstream's bytes stay where the gateway inserts members.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.gateway import StartGateway, StartUpstream, route_config
from tests.support.paths import MCP_SERVERS

NODE = MCP_SERVERS / "node_modules" / ".bin" / "node"
HUGE = "9" * 5000
BODIES = {
    "past float range": b'{"message": "bad value", "value": 1e400, "low": -1e400}',
    "digits past a double": b'{"message": "bad", "big": 12345678901234567890.5, "n": 1.10}',
    "5000-digit integer": b'{"message": "bad", "n": ' + HUGE.encode() + b"}",
    "lone surrogate escape": b'{"message": "bad \\ud800 name"}',
    "repeated name": b'{"message": "first", "message": "second"}',
    "NaN (not JSON)": b'{"message": "bad", "value": NaN}',
    "Infinity (not JSON)": b'{"message": "bad", "value": Infinity}',
    "masked and a huge number": b'{"message": "bad", "password": "a b c", "value": 1e400}',
}
STRICT_PARSE = """
const bodies = JSON.parse(require("fs").readFileSync(0, "utf8"));
const verdicts = bodies.map((b) => {
  try { JSON.parse(Buffer.from(b, "base64").toString("utf8")); return "ok"; }
  catch (e) { return String(e.message); }
});
process.stdout.write(JSON.stringify(verdicts));
"""


async def strictly_parsed(bodies: list[bytes]) -> list[str]:
    """What Node's JSON.parse says of each body: "ok", or its error."""
    assert NODE.exists(), f"{NODE} is missing: run `make mcp-servers`"
    node = await asyncio.create_subprocess_exec(
        str(NODE),
        "-e",
        STRICT_PARSE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    payload = json.dumps([base64.b64encode(b).decode() for b in bodies]).encode()
    out, _ = await asyncio.wait_for(node.communicate(payload), 60)
    assert node.returncode == 0
    verdicts: list[str] = json.loads(out)
    return verdicts


async def upstream_of(start_upstream: StartUpstream) -> str:
    async def answer(request: web.Request) -> web.Response:
        raw = BODIES[request.query["case"]]
        return web.Response(status=422, body=raw, content_type="application/json")

    app = web.Application()
    app.router.add_get("/x", answer)
    return await start_upstream(app)


async def fetch(url: str, case: str, **headers: str) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(url + "/x", params={"case": case}, headers=headers) as answer,
    ):
        return answer.status, await answer.read()


@pytest.mark.parametrize("mode", ["envelope", "additive"])
async def test_every_answer_parses_strictly(
    start_upstream: StartUpstream, start_gateway: StartGateway, mode: str
) -> None:
    upstream = await upstream_of(start_upstream)
    gateway = await start_gateway(route_config(upstream, mode=mode))
    answers = {case: await fetch(gateway.url, case) for case in BODIES}
    direct = {case: await fetch(upstream, case) for case in BODIES}
    assert all(status == 422 for status, _ in answers.values())
    written = {
        case: body for case, (_, body) in answers.items() if body != direct[case][1]
    }  # what the gateway wrote, not the upstream's own bytes passed through
    verdicts = await strictly_parsed(list(written.values()))
    assert dict(zip(written, verdicts, strict=True)) == dict.fromkeys(written, "ok")
    if mode == "envelope":
        assert set(written) == set(BODIES)
    else:  # a body that is not JSON is the upstream's, untouched, as without a gateway
        assert set(BODIES) - set(written) == {"NaN (not JSON)", "Infinity (not JSON)"}


async def test_meta_original_keeps_the_upstreams_numbers(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await upstream_of(start_upstream)
    gateway = await start_gateway(route_config(upstream, mode="envelope"))

    async def original(case: str) -> bytes:
        _, body = await fetch(gateway.url, case)
        start = body.index(b'"original":')
        return body[start:]

    assert b'"body":{"message": "bad value", "value": 1e400, "low": -1e400}' in await original(
        "past float range"
    )
    assert b"12345678901234567890.5" in await original("digits past a double")
    assert b"1.10" in await original("digits past a double")
    assert HUGE.encode() in await original("5000-digit integer")
    assert b'"message": "first", "message": "second"' in await original("repeated name")
    masked = await original("masked and a huge number")
    assert b'"password":"[REDACTED]"' in masked and b'"value":1e400' in masked
    # Not JSON: carried as a string, which any parser reads.
    _, body = await fetch(gateway.url, "NaN (not JSON)")
    assert json.loads(body)["meta"]["original"]["body"] == BODIES["NaN (not JSON)"].decode()


async def test_additive_keeps_the_upstreams_bytes_and_only_inserts(
    start_upstream: StartUpstream, start_gateway: StartGateway
) -> None:
    upstream = await upstream_of(start_upstream)
    gateway = await start_gateway(route_config(upstream))
    for case in ("past float range", "digits past a double", "5000-digit integer"):
        _, direct = await fetch(upstream, case)
        _, merged = await fetch(gateway.url, case)
        head = direct[: direct.rindex(b"}")]  # everything up to the closing brace
        assert merged.startswith(head) and merged.endswith(b"}"), case
        assert json.loads(merged, parse_int=str)["error"]["code"]


async def test_a_json_clients_envelope_of_a_page_parses_strictly(
    start_upstream: StartUpstream, start_gateway: StartGateway, tmp_path: Path
) -> None:
    async def page(request: web.Request) -> web.Response:
        text = "<html><body>Error \ud7ff at 1e400 NaN password: x y</body></html>"
        return web.Response(status=500, text=text, content_type="text/html")

    app = web.Application()
    app.router.add_get("/x", page)
    upstream = await start_upstream(app)
    gateway = await start_gateway(route_config(upstream))
    status, body = await fetch(gateway.url, "page", Accept="application/json")
    assert status == 500
    assert await strictly_parsed([body]) == ["ok"]
