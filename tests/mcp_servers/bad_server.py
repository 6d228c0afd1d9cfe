"""A stdio MCP server that misbehaves on request, for tests/test_security_mcp.py.

`python bad_server.py [--banner TEXT] [--stderr BYTES]` prints TEXT (not JSON) first and
writes BYTES of noise to stderr before reading anything. Then each request line is answered
as its params say, so a test scripts the server from the client side:

- `_reply`: an object merged into the response (`{"result": …}` or `{"error": …}`); the
  response's `id` is the request's, exactly as it was parsed;
- `_raw`: a string written as the response line instead (no newline added);
- `_stderr`: that many bytes written to stderr before answering;
- `_exit`: exit with this status right after reading the request, answering nothing;
- `_kill`: kill itself with this signal instead.

`initialize` is answered with a minimal result; notifications get no answer.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

INIT_RESULT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "bad-server", "version": "1"},
}


def noise(size: int) -> None:
    line = b"E" * 1023 + b"\n"
    for _ in range(size // len(line)):
        sys.stderr.buffer.write(line)
    sys.stderr.buffer.flush()


def answer(message: dict[str, Any]) -> bytes | None:
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    if "_stderr" in params:
        noise(int(params["_stderr"]))
    if "_kill" in params:
        os.kill(os.getpid(), int(params["_kill"]))
    if "_exit" in params:
        sys.stdout.buffer.flush()
        raise SystemExit(int(params["_exit"]))
    if "_raw" in params:
        raw: str = params["_raw"]
        return raw.encode()
    if "id" not in message:
        return None
    if message.get("method") == "initialize":
        reply: dict[str, Any] = {"result": INIT_RESULT}
    else:
        reply = params.get("_reply", {"result": {}})
    body = {"jsonrpc": "2.0", "id": message["id"], **reply}
    return json.dumps(body).encode() + b"\n"


def main(argv: list[str]) -> None:
    if "--banner" in argv:
        sys.stdout.buffer.write(argv[argv.index("--banner") + 1].encode() + b"\n")
        sys.stdout.buffer.flush()
    if "--stderr" in argv:
        noise(int(argv[argv.index("--stderr") + 1]))
    for line in sys.stdin.buffer:
        message = json.loads(line)
        out = answer(message) if isinstance(message, dict) else None
        if out is not None:
            sys.stdout.buffer.write(out)
            sys.stdout.buffer.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
