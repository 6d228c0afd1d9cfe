"""The MCP gateway: JSON-RPC tracking, tool-failure upgrades, Streamable HTTP, stdio, bridge.

Sits above `gateway.http`, whose forwarding pieces it reuses: `gateway.serve.handler` dispatches an
MCP route here. Successes pass through; only responses to requests the gateway saw go out are
parsed, and only failures among them (and `tools/list` results) are rewritten.
"""
