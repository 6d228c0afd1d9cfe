"""The names of the headers the gateway itself reads or writes, each defined once.

Low in the layering (it imports nothing) so the HTTP data path, the MCP relays and the
bridge all use the same spelling. Header names are case-insensitive on the wire; where a
lower-case form is needed (the hygiene sets of gateway/exchange/headers.py) it is derived
from these.
"""

from __future__ import annotations

REQUEST_ID = "X-Request-Id"
"""The request id: taken from the client when it is a sane token, else made; sent upstream
and back to the client, and written into every envelope and log line."""

MCP_SESSION_ID = "Mcp-Session-Id"
MCP_PROTOCOL_VERSION = "MCP-Protocol-Version"
"""The MCP Streamable HTTP session: relayed as sent on an upstream route; on a bridge route,
the id of the bridge session (and its child process) that answers."""

ERROR_FORMAT = "X-Error-Format"
"""The shape a caller asks its failures in (a mode), honoured when the route allows it."""

ACCEPT = "Accept"
"""Read on failures only: a client that prefers JSON gets an HTML or text error as the
envelope (`gateway/text/accept.py`, `routes[].json_for_json_clients`)."""

RELAYED_PEER = "X-Mendpoint-Peer"
"""Under `serve --workers`: the client's TCP peer, as the worker that relayed a bridge request
to the session's owner saw it. Believed only on the sibling socket
(`gateway.config.trust.from_sibling`); set by the relaying worker, replacing whatever the
client sent."""

RELAY_SIGNATURE = "X-Mendpoint-Relay"
"""With `fleet.sessions`: `TIME.HMAC` over a request one replica relays to another's internal
port (gateway.config.session_keys); the port refuses a request without a valid one, and only
then is `X-Mendpoint-Peer` believed from another machine."""

OWN_HEADERS = (RELAYED_PEER, RELAY_SIGNATURE)
"""The headers only the gateway writes, between its own processes: never forwarded upstream,
whoever sent them (a client's copy would reach the upstream as the gateway's word)."""

__all__ = [
    "ACCEPT",
    "ERROR_FORMAT",
    "MCP_PROTOCOL_VERSION",
    "MCP_SESSION_ID",
    "OWN_HEADERS",
    "RELAYED_PEER",
    "RELAY_SIGNATURE",
    "REQUEST_ID",
]
