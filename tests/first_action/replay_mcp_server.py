"""An MCP server over stdio that answers every request with a recorded response.

    python replay_mcp_server.py RECORDING.json

The recording (tests/first_action/recorded/mcp/NAME.json) holds a real server's raw response
text by request id; this writes it back, as it was, to the request with that id. Notifications
get nothing; a request with an id the recording lacks gets -32603 so the replay fails loudly.
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    with open(path, encoding="utf-8") as handle:
        responses: dict[str, str | None] = json.load(handle)["responses"]
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or "id" not in message or "method" not in message:
            continue
        text = responses.get(str(message["id"]))
        if text is None:
            error = {"code": -32603, "message": f"no recorded response for id {message['id']}"}
            text = json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error})
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
