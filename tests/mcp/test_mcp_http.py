"""Streamable HTTP through a `type: mcp` route: the official SDK client against an SDK server
(both protocol revisions, SSE and JSON responses), and a scripted upstream for the wire details."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from mcp import Client

from tests.support.gateway import StartGateway, StartUpstream, route_config
from tests.support.mcp import INIT


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("sdk_server", [[], ["json"]], ids=["sse", "json"], indirect=True)
async def test_sdk_client_through_the_gateway(
    start_gateway: StartGateway, sdk_server: str, mode: str
) -> None:
    gateway = await start_gateway(route_config(sdk_server, type="mcp"))
    async with Client(gateway.url + "/mcp", mode=mode) as client:
        ok = await client.call_tool("add", {"a": 2, "b": 40})
        assert ok.is_error is not True
        assert ok.structured_content == {"result": 42}
        failed = await client.call_tool("read_note", {"name": "nope"})
        assert failed.is_error is True
        item = json.loads(failed.content[-1].text)["mendpoint_failure"]  # type: ignore[union-attr]
        assert item["error"]["code"] == "FILE_NOT_FOUND"
        assert item["error"]["fix_required"].startswith("Use a path that exists")
        assert failed.meta is not None
        assert failed.meta["mendpoint/failure"] == item
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} >= {"add", "read_note"}
        assert all("never invent recovery skills" in (t.description or "") for t in tools.tools)


@pytest.mark.parametrize("sdk_server", [["json", "stateless"]], ids=["json"], indirect=True)
async def test_success_bytes_equal_direct_and_original_mode_changes_nothing(
    start_gateway: StartGateway, sdk_server: str
) -> None:
    gateway = await start_gateway(route_config(sdk_server, type="mcp"))
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

    async def post(base: str, message: dict[str, Any], extra: dict[str, str]) -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as session:
            await session.post(base + "/mcp", json=INIT, headers=headers)
            async with session.post(
                base + "/mcp",
                json=message,
                headers={**headers, **extra, "MCP-Protocol-Version": "2025-11-25"},
            ) as response:
                return response.status, await response.read()

    add = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
    }
    bad = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "read_note", "arguments": {"name": "x"}},
    }
    assert await post(gateway.url, add, {}) == await post(sdk_server, add, {})
    original = {"X-Error-Format": "original"}
    assert await post(gateway.url, bad, original) == await post(sdk_server, bad, {})
    status, upgraded = await post(gateway.url, bad, {})
    assert status == 200 and b"mendpoint_failure" in upgraded


@pytest.mark.parametrize("sdk_server", [[], ["json"]], ids=["sse", "json"], indirect=True)
async def test_a_success_is_the_servers_bytes_and_a_failure_is_upgraded(
    start_gateway: StartGateway, sdk_server: str
) -> None:
    """Differential, in a session of each: a successful call (the SDK writes `"isError":false`,
    which must not make it a candidate for rewriting) answers with exactly the bytes and
    content type the server sent directly, as an event stream or as JSON; a failing call
    keeps the server's item and gains the failure."""
    gateway = await start_gateway(route_config(sdk_server, type="mcp"))
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }

    async def calls(base: str, *messages: dict[str, Any]) -> list[tuple[int, str, bytes]]:
        async with aiohttp.ClientSession() as session:
            opened = await session.post(base + "/mcp", json=INIT, headers=headers)
            in_session = {**headers, "Mcp-Session-Id": opened.headers["Mcp-Session-Id"]}
            done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await session.post(base + "/mcp", json=done, headers=in_session)
            answers = []
            for message in messages:
                async with session.post(
                    base + "/mcp", json=message, headers=in_session
                ) as response:
                    media = response.headers["Content-Type"]
                    answers.append((response.status, media, await response.read()))
            return answers

    def call(rid: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        params = {"name": name, "arguments": arguments}
        return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}

    successes = [call(1, "add", {"a": 1, "b": 2}), call(2, "divide", {"a": 1, "b": 4})]
    direct = await calls(sdk_server, *successes)
    assert all(b'"isError":false' in body for _, _, body in direct)
    assert await calls(gateway.url, *successes) == direct

    failing = call(3, "read_note", {"name": "nope"})
    [(status, media, body)] = await calls(gateway.url, failing)
    [(_, direct_media, direct_body)] = await calls(sdk_server, failing)
    assert status == 200 and media == direct_media
    data = body if media == "application/json" else body.split(b"data: ", 1)[1]
    result = json.loads(data)["result"]
    direct_data = direct_body if media == "application/json" else direct_body.split(b"data: ")[1]
    assert result["content"][0] == json.loads(direct_data)["result"]["content"][0]
    assert result["isError"] is True
    upgraded = json.loads(result["content"][-1]["text"])["mendpoint_failure"]
    assert upgraded["error"]["code"] == "FILE_NOT_FOUND"
    assert result["_meta"]["mendpoint/failure"] == upgraded


class Scripted:
    """An MCP upstream scripted at the wire level: echoes headers, streams events, errors."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/mcp", self.mcp)
        return app

    async def mcp(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        if request.method == "GET":
            return await self.resumed(request)
        message = await request.json()
        if "id" not in message:
            return web.Response(status=202)
        if message["method"] == "unknown/session":
            return web.Response(
                status=404,
                body=b'{"jsonrpc":"2.0","error":{"code":-32001}}',
                content_type="application/json",
            )
        # The response to this call is "lost": the stream ends after its priming event.
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"id: ev-0\nretry: 250\ndata:\n\n")
        await response.write_eof()
        return response

    async def resumed(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        result = {
            "content": [
                {"type": "text", "text": "Access denied - path outside allowed directories: /etc"}
            ],
            "isError": True,
        }
        data = json.dumps({"jsonrpc": "2.0", "id": 5, "result": result}).encode()
        await response.write(b": resumed\nid: ev-1\nevent: message\ndata: " + data + b"\n\n")
        await response.write_eof()
        return response


async def test_wire_details(start_gateway: StartGateway, start_upstream: StartUpstream) -> None:
    scripted = Scripted()
    upstream = await start_upstream(scripted.app())
    gateway = await start_gateway(route_config(upstream, type="mcp"))
    session_headers = {
        "Mcp-Session-Id": "s-1",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "read_text_file",
        "Mcp-Param-Region": "eu",
        "Mcp-Param-X-Unknown": "kept",
    }
    call = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "read_text_file", "arguments": {"path": "/etc"}},
    }
    response = await gateway.request("POST", "/mcp", json=call, headers=session_headers)
    assert response.status == 200
    assert await response.read() == b"id: ev-0\nretry: 250\ndata:\n\n"
    sent = scripted.seen[-1]
    for name, value in session_headers.items():
        assert sent[name] == value
    resumed = await gateway.request(
        "GET", "/mcp", headers={"Mcp-Session-Id": "s-1", "Last-Event-ID": "ev-0"}
    )
    assert scripted.seen[-1]["Last-Event-ID"] == "ev-0"
    body = await resumed.read()
    head, _, data = body.partition(b"data: ")
    assert head == b": resumed\nid: ev-1\nevent: message\n"
    upgraded = json.loads(data)
    assert upgraded["id"] == 5
    assert (
        json.loads(upgraded["result"]["content"][-1]["text"])["mendpoint_failure"]["error"]["code"]
        == "PATH_OUTSIDE_ALLOWED"
    )
    note = await gateway.request("POST", "/mcp", json={"jsonrpc": "2.0", "method": "n"})
    assert note.status == 202
    gone = await gateway.request(
        "POST", "/mcp", json={"jsonrpc": "2.0", "id": 9, "method": "unknown/session"}
    )
    assert gone.status == 404
    assert await gone.read() == b'{"jsonrpc":"2.0","error":{"code":-32001}}'
    assert gone.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("route", "headers", "status"),
    [
        ({}, {"Origin": "http://evil.example"}, 403),
        ({"allowed_origins": ["https://app.example"]}, {"Origin": "https://app.example"}, 202),
        ({"allowed_hosts": ["mcp.internal"]}, {}, 403),
        ({}, {}, 202),
    ],
    ids=["foreign-origin", "allowed-origin", "host-not-allowed", "no-origin"],
)
async def test_dns_rebinding_defence(
    start_gateway: StartGateway,
    start_upstream: StartUpstream,
    route: dict[str, Any],
    headers: dict[str, str],
    status: int,
) -> None:
    scripted = Scripted()
    upstream = await start_upstream(scripted.app())
    gateway = await start_gateway(route_config(upstream, type="mcp", **route))
    response = await gateway.request(
        "POST", "/mcp", json={"jsonrpc": "2.0", "method": "n"}, headers=headers
    )
    assert response.status == status
    assert len(scripted.seen) == (0 if status == 403 else 1)


async def read_events_until(response: aiohttp.ClientResponse, rid: int) -> list[tuple[str, Any]]:
    """(event id, data) of each event up to the response with id `rid`."""
    events: list[tuple[str, Any]] = []
    event_id, data = "", ""
    async with asyncio.timeout(15):
        async for raw in response.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif not line:
                message = json.loads(data) if data else None
                events.append((event_id, message))
                if isinstance(message, dict) and message.get("id") == rid:
                    return events
                event_id, data = "", ""
    raise AssertionError(f"no response {rid} in {events}")


@pytest.mark.parametrize("sdk_server", [["resumable"]], ids=["resumable"], indirect=True)
async def test_a_replayed_failure_is_upgraded_like_its_first_delivery(
    start_gateway: StartGateway, sdk_server: str
) -> None:
    """GET with `Last-Event-ID` replays a POST stream's events; the tool error in it comes
    back upgraded, as it did the first time (docs/mcp.md, "Streamable HTTP routes")."""
    gateway = await start_gateway(route_config(sdk_server, type="mcp"))
    accept = {"Accept": "application/json, text/event-stream"}
    started = await gateway.request("POST", "/mcp", json=INIT, headers=accept)
    session = {**accept, "Mcp-Session-Id": started.headers["Mcp-Session-Id"]}
    await started.read()
    notified = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await (await gateway.request("POST", "/mcp", json=notified, headers=session)).read()
    params = {"name": "read_note_slowly", "arguments": {"name": "nope"}}
    failing = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    first = await gateway.request("POST", "/mcp", json=failing, headers=session)
    events = await read_events_until(first, 7)
    first.release()
    assert "mendpoint_failure" in events[-1][1]["result"]["content"][-1]["text"]
    assert len(events) >= 2  # the log line, then the answer
    before = events[-2][0]  # the event before the answer: everything after it is replayed
    resumed = await gateway.request(
        "GET", "/mcp", headers={**session, "Accept": "text/event-stream", "Last-Event-ID": before}
    )
    replayed = await read_events_until(resumed, 7)
    resumed.release()
    assert replayed[-1][0] == events[-1][0]  # the same event, replayed
    result = replayed[-1][1]["result"]
    assert result["isError"] is True
    assert "mendpoint_failure" in result["content"][-1]["text"]
    assert result["_meta"]["mendpoint/failure"]["error"]["code"] == "FILE_NOT_FOUND"
