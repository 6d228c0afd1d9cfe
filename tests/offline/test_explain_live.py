"""`explain` shows what the live gateway sends.

Every fixture case of every shipped pack, in every mode, is replayed by a real upstream (a
raw socket writing exactly the case's status, headers and body, or failing the way its
transport fault says) through a real gateway, and the answer is compared with the one
`explain` builds for the same sample under the same config: status, headers and body. Only
what differs per request by nature is left out: `Date`, `Server` (set by the server) and the
envelope's `meta.duration_ms` and an MCP tool failure's `retryNotBefore` (a clock time), so
`Content-Length` is checked against each side's own body instead.
The request id is the sample's, sent as `X-Request-Id`.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.config.loader import builtin_names, builtin_text
from gateway.failure import Mode, TransportKind
from gateway.mcp.rewrite import TOOL_FAILURE_KEY
from gateway.offline.explain import Answer, Sample, explain
from gateway.offline.fixtures import FixtureCase, load_fixtures, sample_of
from tests.support.gateway import RunningGateway, StartGateway, StartRaw
from tests.support.ports import free_port

CASES = [
    (pack, case)
    for pack in builtin_names()
    for case in load_fixtures(builtin_text(f"fixtures/{pack}"), pack).cases
]
PER_REQUEST = frozenset({"date", "server", "content-length"})
# 254 characters of labels: longer than a DNS name may be, so the resolver fails at once
# without a single packet leaving the machine.
UNRESOLVABLE = ".".join(("x" * 63, "y" * 63, "z" * 63, "w" * 62))
LIMITS = {"response_timeout_s": 0.3, "connect_timeout_s": 0.3}


@dataclass
class Script:
    """What the raw upstream does with the next request: reply, stall, close, babble, or
    answer a TLS handshake in clear text."""

    kind: str = "reply"
    reply: bytes = b""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.kind == "plain":  # the gateway speaks TLS: answering in clear text fails it
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        await reader.readexactly(length)
        if self.kind == "stall":
            await reader.read()  # until the gateway gives up and closes
            return
        if self.kind == "close":
            return
        writer.write(b"NOT HTTP AT ALL\r\n\r\n" if self.kind == "garbage" else self.reply)
        await writer.drain()


def raw_reply(status: int, headers: CIMultiDict[str], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status} Fixture"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@pytest.fixture
async def full_backlog() -> AsyncIterator[str]:
    """A listener whose accept queue is full: a connect to it times out, on loopback."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    filler = socket.socket()
    filler.connect(("127.0.0.1", port))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        filler.close()
        server.close()


@dataclass(frozen=True)
class Live:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


async def live_answer(gateway: RunningGateway, sample: Sample, mode: Mode) -> Live:
    headers = {
        **sample.request_headers,
        "X-Error-Format": mode.value,
        "X-Request-Id": sample.request_id,
    }
    data: bytes | None = None
    if sample.is_mcp:
        headers |= {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        data = json.dumps(sample.rpc_request()).encode()
    method = "POST" if sample.is_mcp else sample.method
    async with gateway.session.request(
        method, gateway.url + sample.path, headers=headers, data=data
    ) as response:
        return Live(response.status, response.headers, await response.read())


async def list_tools(gateway: RunningGateway, path: str) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    data = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    async with gateway.session.post(gateway.url + path, headers=headers, data=data) as response:
        assert response.status == 200
        await response.read()


def comparable(status: int, headers: CIMultiDict[str] | CIMultiDictProxy[str], body: bytes) -> Any:
    assert headers.getall("Content-Length") == [str(len(body))]
    fields = sorted((k.lower(), v) for k, v in headers.items() if k.lower() not in PER_REQUEST)
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return status, fields, body
    if isinstance(parsed, dict) and isinstance(parsed.get("meta"), dict):
        parsed["meta"].pop("duration_ms", None)
    result = parsed.get("result") if isinstance(parsed, dict) else None
    meta = result.get("_meta") if isinstance(result, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get(TOOL_FAILURE_KEY), dict):
        meta[TOOL_FAILURE_KEY].pop("retryNotBefore", None)
    return status, fields, parsed


def upstream_for(case: FixtureCase, script: Script, raw_url: str, backlog: str) -> str:
    targets = {
        TransportKind.CONNECT_REFUSED: f"http://127.0.0.1:{free_port()}",
        TransportKind.DNS_FAILURE: f"http://{UNRESOLVABLE}:80",
        TransportKind.CONNECT_TIMEOUT: backlog,
    }
    if case.transport in targets:
        return targets[case.transport]
    if case.transport is TransportKind.TLS:
        script.kind = "plain"
        return raw_url.replace("http://", "https://")
    script.kind = (
        {
            TransportKind.READ_TIMEOUT: "stall",
            TransportKind.RESET: "close",
            TransportKind.INVALID_RESPONSE: "garbage",
        }.get(case.transport, "reply")
        if case.transport
        else "reply"
    )
    return raw_url


@pytest.mark.parametrize(("pack", "case"), CASES, ids=[f"{p}:{c.name}" for p, c in CASES])
async def test_explain_equals_the_live_answer(
    pack: str,
    case: FixtureCase,
    start_gateway: StartGateway,
    start_raw: StartRaw,
    full_backlog: str,
) -> None:
    script = Script()
    raw = await start_raw(script.serve)
    sample = sample_of(case)
    upstream = upstream_for(case, script, raw.url, full_backlog)
    route: dict[str, Any] = {"name": "api", "prefix": "/", "upstream": upstream}
    if sample.is_mcp:
        route["type"] = "mcp"
        body = json.dumps(sample.rpc_response(), separators=(",", ":")).encode()
        script.reply = raw_reply(200, CIMultiDict({"Content-Type": "application/json"}), body)
    elif sample.status is not None:
        script.reply = raw_reply(sample.status, sample.headers, sample.body)
    gateway = await start_gateway({"routes": [route], "limits": LIMITS})
    listing = sample.tools_listing()
    if listing is not None:  # the session lists its tools first; the gateway reads them
        answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": listing}).encode()
        failure, script.reply = (
            script.reply,
            raw_reply(200, CIMultiDict({"Content-Type": "application/json"}), answer),
        )
        await list_tools(gateway, sample.path)
        script.reply = failure
    for mode in Mode:
        explained = await explain(gateway.server.loaded, sample, mode)
        live = await live_answer(gateway, sample, mode)
        want = explained.answer
        assert comparable(live.status, live.headers, live.body) == comparable(
            want.status, want.headers, want.body
        ), mode


async def test_an_unparseable_retry_after_is_relayed_alone(
    start_gateway: StartGateway, start_raw: StartRaw
) -> None:
    """A 429 with `Retry-After: soon`: the proxy relays `soon` and adds no second value, and
    `explain` says the same (it used to show `Retry-After: 1` added)."""
    sample = Sample(status=429, headers=CIMultiDict({"Retry-After": "soon"}), body=b"slow down")
    script = Script(reply=raw_reply(429, sample.headers, sample.body))
    raw = await start_raw(script.serve)
    gateway = await start_gateway({"routes": [{"name": "api", "prefix": "/", "upstream": raw.url}]})
    for mode in (Mode.HEADERS, Mode.ENVELOPE):
        explained: Answer = (await explain(gateway.server.loaded, sample, mode)).answer
        live = await live_answer(gateway, sample, mode)
        assert live.headers.getall("Retry-After") == ["soon"]
        assert explained.headers.getall("Retry-After") == ["soon"]
        assert live.headers["X-Error-Code"] == explained.headers["X-Error-Code"] == "RATE_LIMITED"
