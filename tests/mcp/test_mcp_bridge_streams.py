"""The bridge holds the conversation going direct holds (docs/mcp.md#which-stream-a-message-takes).

The official SDK client talks to the same SDK server twice: over Streamable HTTP directly, and
as a stdio child of a bridge route. Progress goes to the call that asked for it, server
requests reach the client and their answers the server, and a cancelled call is never answered
by the gateway (docs/mcp.md#cancelled-requests); raw HTTP shows which stream carried what.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from mcp import Client, MCPError, types
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters

from tests.support.gateway import StartGateway
from tests.support.mcp import RawSession, bridge_config, call
from tests.support.paths import MCP_SERVERS
from tests.support.ports import free_port
from tests.support.upstreams import wait_listening

SERVER = MCP_SERVERS / "conversation_server.py"
STDIO = [sys.executable, str(SERVER), "stdio"]
ACCEPT_BOTH = "application/json, text/event-stream"


@pytest.fixture
async def direct() -> AsyncIterator[str]:
    """The conversation server over Streamable HTTP, for the direct side of each comparison."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER),
        "http",
        str(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_listening(port, process, within_s=60)  # the SDK imports slowly on a busy host
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)


@pytest.fixture
async def bridged(start_gateway: StartGateway) -> str:
    gateway = await start_gateway(bridge_config(STDIO))
    return gateway.url + "/mcp"


@pytest.fixture(params=["direct", "bridge"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("direct" if request.param == "direct" else "bridged"))


async def test_concurrent_calls_each_get_exactly_their_own_progress(url: str) -> None:
    """Two calls with progress at once in one session, 20 rounds: each callback sees its own
    call's notifications, all of them, in order (through the bridge, call A's used to land
    on call B's stream)."""
    steps = 8
    async with Client(url, mode="legacy") as client:

        async def run(tag: str, seen: list[str | None]) -> Any:
            async def progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append(message)

            arguments = {"tag": tag, "steps": steps}
            result = await client.call_tool("count", arguments, progress_callback=progress)
            return result.structured_content

        for round_ in range(20):
            seen: dict[str, list[str | None]] = {"A": [], "B": []}
            answers = list(await asyncio.gather(run("A", seen["A"]), run("B", seen["B"])))
            assert answers == [{"result": "A"}, {"result": "B"}]
            for tag in ("A", "B"):
                expected = [f"{tag} {step}" for step in range(1, steps + 1)]
                assert seen[tag] == expected, f"round {round_}, call {tag}"


async def sampling(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    first = params.messages[0].content
    assert isinstance(first, types.TextContent) and first.text == "six times seven?"
    answer = types.TextContent(type="text", text="forty-two")
    return types.CreateMessageResult(role="assistant", content=answer, model="m")


async def elicitation(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    assert params.message == "Your name?"
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///srv/notes", name="notes")])


async def test_server_requests_reach_the_client_and_answers_the_server(url: str) -> None:
    async with Client(
        url,
        mode="legacy",
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=list_roots,
    ) as client:
        model = await client.call_tool("ask_model", {"question": "six times seven?"})
        assert model.structured_content == {"result": "forty-two"}
        user = await client.call_tool("ask_user", {})
        assert user.structured_content == {"result": "Ada"}
        listed = await client.call_tool("roots", {})
        assert listed.structured_content == {"result": ["file:///srv/notes"]}


@pytest.mark.timeout(240)  # a new session each round: the SDK server starts slowly on a busy host
async def test_a_call_cancelled_by_timeout_then_leaving_the_client_raises_nothing(
    url: str,
) -> None:
    """The SDK cancels a call that timed out; leaving `async with` then ends the session
    (DELETE). The bridge used to answer the cancelled call at that moment, and the client,
    already closing, raised ExceptionGroup([ClosedResourceError]) on 4 of 6 runs."""
    for _ in range(4):
        async with Client(url, mode="legacy") as client:
            with pytest.raises(MCPError, match="timed out"):
                await client.call_tool("wait", {"seconds": 30}, read_timeout_seconds=0.3)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("side", ["direct", "bridge"])
async def test_a_call_cancelled_then_the_server_exiting_raises_nothing(
    side: str, start_gateway: StartGateway
) -> None:
    """The same with the server exiting after the cancel: directly a stdio child of the
    client, or a bridge session's child."""
    server: StdioServerParameters | str
    if side == "direct":
        server = StdioServerParameters(command=STDIO[0], args=STDIO[1:])
    else:
        server = (await start_gateway(bridge_config(STDIO))).url + "/mcp"
    for _ in range(2):
        async with Client(server, mode="legacy") as client:
            with pytest.raises(MCPError, match="timed out"):
                await client.call_tool("wait", {"seconds": 30}, read_timeout_seconds=0.3)
            with pytest.raises(MCPError):
                await client.call_tool("quit", {}, read_timeout_seconds=10)


def cancelled(n: int) -> dict[str, Any]:
    params = {"requestId": n, "reason": "the user gave up"}
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


async def read_events(response: aiohttp.ClientResponse) -> list[Any]:
    body = (await response.read()).decode()
    events = [e for e in body.split("\n\n") if e.strip()]
    return [json.loads(e.partition("data: ")[2]) for e in events]


async def open_call(session: RawSession, message: dict[str, Any]) -> asyncio.Task[Any]:
    headers = {**session.headers, "Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
    post = session.http.post(session.url, data=json.dumps(message), headers=headers)
    return asyncio.ensure_future(post)


@pytest.mark.parametrize("end", ["delete", "server exit"])
async def test_a_cancelled_request_is_never_answered_by_the_gateway(bridged: str, end: str) -> None:
    """Cancel a call, then end the session: the call's POST ends with nothing for it."""
    async with aiohttp.ClientSession() as http:
        session = RawSession(http, bridged)
        await session.start()
        waiting = await open_call(session, call(5, "wait", {"seconds": 30}))
        await asyncio.sleep(0.3)  # the call reached the server
        assert (await session.post(cancelled(5))).status == 202
        if end == "delete":
            assert (await session.delete()).status == 200
        else:
            gone = await session.post(call(6, "quit", {}), ACCEPT_BOTH)
            answer = json.loads(await gone.read())
            assert answer["id"] == 6 and answer["error"]["code"] == -32000  # not cancelled
        response = await asyncio.wait_for(waiting, 10)
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert await read_events(response) == []


async def test_a_cancelled_request_the_server_answers_anyway_gets_its_answer(
    bridged: str,
) -> None:
    """The server decides: an answer it sends after the cancel is relayed, not made up."""
    async with aiohttp.ClientSession() as http:
        session = RawSession(http, bridged)
        await session.start()
        waiting = await open_call(session, call(5, "wait", {"seconds": 0.5}))
        await asyncio.sleep(0.1)
        # An id the server never saw: the server ignores it, the call goes on.
        assert (await session.post(cancelled(77))).status == 202
        response = await asyncio.wait_for(waiting, 10)
        answer = json.loads(await response.read())
        assert answer["id"] == 5 and answer["result"]["structuredContent"] == {"result": "waited"}


async def test_messages_take_the_stream_the_spec_gives_them(bridged: str) -> None:
    """On the wire: a server request made during the only call in flight rides that call's
    stream; a list-changed notification goes to the GET stream, and waits for one when none
    is open."""
    async with aiohttp.ClientSession() as http:
        session = RawSession(http, bridged)
        await session.start()
        grown = await session.post(call(3, "grow", {}), ACCEPT_BOTH)
        assert json.loads(await grown.read())["id"] == 3  # one JSON answer: nothing before it
        headers = {**session.headers, "Accept": "text/event-stream"}
        listening = await http.get(bridged, headers=headers)
        assert listening.status == 200
        queued = json.loads((await listening.content.readuntil(b"\n\n")).partition(b"data: ")[2])
        assert queued["method"] == "notifications/tools/list_changed"
        asking = await open_call(session, call(4, "roots", {}))
        response = await asyncio.wait_for(asking, 10)
        first = json.loads((await response.content.readuntil(b"\n\n")).partition(b"data: ")[2])
        assert first["method"] == "roots/list"
        roots = {"jsonrpc": "2.0", "id": first["id"], "result": {"roots": []}}
        assert (await session.post(roots)).status == 202
        rest = await read_events(response)
        assert [m.get("id") for m in rest] == [4]
        assert rest[0]["result"]["structuredContent"] == {"result": []}
        listening.close()
