"""`mendpoint stdio` starts its server before reading its config, and relays while the config
loads (docs/performance.md#mcp-start-up).

The config, or the rule pack it includes, is a named pipe the test writes only later: the
server runs (and answers, through the relay) while the gateway's config is not loaded yet,
and the session then goes on as usual. A config that does not load still fails the command
with its FILE:LINE, and the server started for it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.mcp import INIT, call
from tests.support.paths import MCP_SERVERS

MENDPOINT = [sys.executable, "-m", "gateway", "--log-level", "warning", "stdio"]
SERVER = (
    "import json, os, sys\n"
    "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "for line in sys.stdin:\n"
    "    req = json.loads(line)\n"
    "    if 'id' not in req:\n"
    "        continue\n"
    "    if req['method'] == 'initialize':\n"
    "        result = {'protocolVersion': '2025-11-25', 'capabilities': {},"
    " 'serverInfo': {'name': 'p', 'version': '1'}}\n"
    "    else:\n"
    "        result = {'content': [{'type': 'text', 'text': 'ENOENT: no such file or directory,"
    " open \\'/x\\''}], 'isError': True}\n"
    "    print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': result}), flush=True)\n"
)


def wait_for(path: Path, within_s: float = 60) -> str:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def test_the_server_starts_before_the_config_is_read(tmp_path: Path) -> None:
    config, pid_file = tmp_path / "gateway.yaml", tmp_path / "pid"
    os.mkfifo(config)
    with subprocess.Popen(
        [*MENDPOINT, "--config", str(config), "--", sys.executable, "-c", SERVER, str(pid_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as relay:
        assert relay.stdin is not None and relay.stdout is not None
        try:
            pid = int(wait_for(pid_file))  # started, though the gateway has no config yet
            assert alive(pid) and relay.poll() is None
            with open(config, "w") as fifo:
                fifo.write("routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\n")
            lines = b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, call(1, "read", {})))
            relay.stdin.write(lines)
            relay.stdin.flush()
            init = json.loads(relay.stdout.readline())
            assert init["id"] == 0 and init["result"]["serverInfo"]["name"] == "p"
            failed = json.loads(relay.stdout.readline())
            # The config's rules were loaded and upgrade the tool error, as before.
            assert "mendpoint/failure" in failed["result"]["_meta"]
            relay.stdin.close()
            assert relay.wait(60) == 0
        finally:
            relay.kill()


def running_with(marker: str) -> list[int]:
    """The live processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in words and entry.name.isdigit() and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_a_config_that_does_not_load_fails_and_ends_the_server(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\nlisten: x\n")
    marker = f"mendpoint-test-server-{os.getpid()}-{time.monotonic_ns()}"
    server = [sys.executable, "-c", "import time; time.sleep(60)", marker]
    done = subprocess.run(
        [*MENDPOINT, "--config", str(config), "--", *server],
        input=b"",
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert f"{config}:3: listen" in done.stderr.decode()
    assert done.stdout == b""
    for _ in range(200):
        if not running_with(marker):
            break
        time.sleep(0.05)
    assert running_with(marker) == [], "the server outlived the failed command"


# --- the first answer does not wait for the config (docs/performance.md#mcp-start-up) ---------

NOTE_RULE = {
    "id": "note-missing",
    "match": {"mcp": {"tool": "read_note"}, "body": "ENOENT"},
    "error": {
        "code": "NOTE_NOT_FOUND",
        "category": "VALIDATION_ERROR",
        "fix_required": "Name a note that exists, then call again",
    },
}
SDK_SERVER = [sys.executable, str(MCP_SERVERS / "sdk_server.py"), "stdio"]


def slow_config(tmp_path: Path, **mcp: Any) -> tuple[Path, Path]:
    """A config whose rule pack is a named pipe: loading it waits until the test writes it."""
    pack = tmp_path / "rules.yaml"
    os.mkfifo(pack)
    config = tmp_path / "gateway.yaml"
    route = {"name": "api", "upstream": "http://127.0.0.1:9"}
    config.write_text(json.dumps({"routes": [route], "include": [str(pack)], "mcp": mcp}))
    return config, pack


def write_later(pack: Path, rules: list[dict[str, Any]]) -> threading.Thread:
    """Write the pack from a thread (opening a pipe blocks until its reader opens it)."""

    def write() -> None:
        with open(pack, "w") as fifo:
            fifo.write(json.dumps({"rules": rules}))

    return threading.Thread(target=write, daemon=True)


@pytest.mark.timeout(180)
async def test_the_first_answer_does_not_wait_for_the_config(tmp_path: Path) -> None:
    """The SDK client's `initialize` is answered while the config's rule pack is still
    unwritten; a failure sent then is answered once the pack is there, by its rule."""
    config, pack = slow_config(tmp_path)
    relay = [*MENDPOINT[1:], "--config", str(config), "--"]
    params = StdioServerParameters(command=MENDPOINT[0], args=[*relay, *SDK_SERVER])
    writer = write_later(pack, [NOTE_RULE])
    async with contextlib.AsyncExitStack() as stack:
        async with asyncio.timeout(120):  # on the code before, entering never returned
            client = await stack.enter_async_context(Client(params))
        stack.callback(writer.join, 5)
        assert not writer.is_alive()  # the pack is unwritten: no config has loaded
        calling = asyncio.ensure_future(client.call_tool("read_note", {"name": "nope"}))
        writer.start()
        failed = await asyncio.wait_for(calling, 120)
        assert failed.is_error is True
        item = json.loads(failed.content[-1].text)["mendpoint_failure"]  # type: ignore[union-attr]
        assert item["error"]["code"] == "NOTE_NOT_FOUND"  # the pack's rule: it waited for it
        ok = await client.call_tool("add", {"a": 2, "b": 3})
        assert ok.structured_content == {"result": 5}


PADDED_SERVER = (
    "import json, sys\n"
    "for line in sys.stdin:\n"
    "    req = json.loads(line)\n"
    "    if 'id' not in req:\n"
    "        continue\n"
    "    if req['method'] == 'initialize':\n"
    "        result = {'protocolVersion': '2025-11-25', 'capabilities': {},"
    " 'serverInfo': {'name': 'p', 'version': '1'}}\n"
    "    else:\n"
    "        pad = 'x' * req['params']['arguments']['pad']\n"
    "        text = \"ENOENT: no such file or directory, open '/x' \" + pad\n"
    "        result = {'content': [{'type': 'text', 'text': text}], 'isError': True}\n"
    "    print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': result}), flush=True)\n"
)


async def test_the_configs_line_limit_holds_before_the_config_has_loaded(tmp_path: Path) -> None:
    """`mcp.max_message_bytes: 2048` is the bound from the first line on: a 3000-byte failure
    is relayed as the server wrote it, unparsed, while the pack is still unwritten; a small
    one waits for the config and comes back upgraded."""
    config, pack = slow_config(tmp_path, max_message_bytes=2048)
    argv = [*MENDPOINT, "--config", str(config), "--", sys.executable, "-c", PADDED_SERVER]
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=-1, stdout=-1, stderr=asyncio.subprocess.DEVNULL
    )
    assert process.stdin is not None and process.stdout is not None
    writer = write_later(pack, [])
    try:
        for message in (INIT, call(1, "read", {"pad": 3000})):
            process.stdin.write(json.dumps(message).encode() + b"\n")
        await process.stdin.drain()
        init = json.loads(await asyncio.wait_for(process.stdout.readline(), 120))
        assert init["id"] == 0 and init["result"]["serverInfo"]["name"] == "p"
        large = await asyncio.wait_for(process.stdout.readline(), 120)
        assert len(large) > 3000 and json.loads(large)["result"]["isError"] is True
        assert "_meta" not in json.loads(large)["result"]  # over the limit: as it came
        assert not writer.is_alive()  # all this before the config could load
        process.stdin.write(json.dumps(call(2, "read", {"pad": 10})).encode() + b"\n")
        await process.stdin.drain()
        writer.start()
        small = json.loads(await asyncio.wait_for(process.stdout.readline(), 120))
        assert small["id"] == 2 and "mendpoint/failure" in small["result"]["_meta"]
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), 60) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        writer.join(5)


def test_a_broken_pack_still_fails_with_its_file_and_line(tmp_path: Path) -> None:
    """The pack loads in a thread while the relay runs; its error is the same FILE:LINE text,
    the command fails, and the server is ended."""
    pack = tmp_path / "rules.yaml"
    pack.write_text("rules:\n  - id: x\n    match: {status: 500}\n    nonsense: 1\n")
    config = tmp_path / "gateway.yaml"
    route = {"name": "api", "upstream": "http://127.0.0.1:9"}
    config.write_text(json.dumps({"routes": [route], "include": [str(pack)]}))
    marker = f"mendpoint-test-server-{os.getpid()}-{time.monotonic_ns()}"
    server = [sys.executable, "-c", "import time; time.sleep(60)", marker]
    with subprocess.Popen(
        [*MENDPOINT, "--config", str(config), "--", *server],
        stdin=subprocess.PIPE,  # kept open: the relay runs until the config fails it
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as relay:
        try:
            assert relay.wait(120) == 1
            assert relay.stderr is not None and relay.stdout is not None
            assert f"{pack}:4" in relay.stderr.read().decode()
            assert relay.stdout.read() == b""
        finally:
            relay.kill()
    for _ in range(200):
        if not running_with(marker):
            break
        time.sleep(0.05)
    assert running_with(marker) == [], "the server outlived the failed command"


def test_a_broken_config_fails_the_command_even_after_its_server_has_exited(
    tmp_path: Path,
) -> None:
    """A server that exits at once leaves the relay done before the config has loaded: the
    config's error is still the command's outcome, never the server's status."""
    config = tmp_path / "gateway.yaml"
    config.write_text("routes:\n  - {name: api, upstream: 'http://127.0.0.1:9'}\nlisten: x\n")
    done = subprocess.run(
        [*MENDPOINT, "--config", str(config), "--", sys.executable, "-c", "pass"],
        input=b"",
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert f"{config}:3: listen" in done.stderr.decode()


def test_a_session_without_a_resolver_never_imports_the_http_client(tmp_path: Path) -> None:
    """aiohttp is the remote resolver's client only (gateway/resolve/breaker.py): a stdio
    session that upgrades a failure, with the embedded config (no `resolver.url`), never
    imports it, about 0.1 s of CPU its config load would spend beside the server's start.
    And the cyclic collector, rested while the config loads, is on again once it has."""
    pid_file = tmp_path / "pid"
    code = (
        "import atexit, gc, sys\n"
        "def report():\n"
        "    print('aiohttp' in sys.modules, gc.isenabled(), file=sys.stderr)\n"
        "atexit.register(report)\n"
        "from gateway.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    lines = b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, call(1, "read", {})))
    server = [sys.executable, "-c", SERVER, str(pid_file)]
    done = subprocess.run(
        [sys.executable, "-c", code, "--log-level", "warning", "stdio", "--", *server],
        input=lines,
        capture_output=True,
        timeout=60,
        check=False,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["id"] for a in answers] == [0, 1], done.stderr
    assert answers[1]["result"]["isError"] is True
    assert "FILE_NOT_FOUND" in json.dumps(answers[1])  # upgraded by the enrichment step
    assert done.stderr.decode().split()[-2:] == ["False", "True"]
