"""The MCP gateway: JSON-RPC tracking, tool-failure upgrades, Streamable HTTP, stdio, bridge.

Sits beside `gateway.proxy` (same layer): an MCP route is routed by the proxy's handler and
served here. Successes pass through; only responses to requests the gateway saw go out are
parsed, and only failures among them (and `tools/list` results) are rewritten.
"""
