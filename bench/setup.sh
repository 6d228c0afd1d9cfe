#!/usr/bin/env bash
# Installs what `make bench` needs on a fresh Debian machine (run as root): nginx and wrk from
# Debian's packages, uvloop into the project venv (the bare proxy runs on it), and mitmproxy
# and mcp-proxy into venvs of their own (.venv/bench-mitm, .venv/bench-mcpproxy) so their
# pinned dependencies never touch the project's. mcp-proxy gets uvloop and httptools, which
# its uvicorn picks up by itself: the peer at its fastest. The MCP peers of bench/mcp_peers.py,
# pinned: IBM ContextForge in .venv/bench-contextforge, the npm `mcp-proxy` and `supergateway`
# in .venv/bench-node. Idempotent: what is already there is not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
.venv/bin/python -c 'import uvloop' 2>/dev/null || .venv/bin/pip install --quiet uvloop
if [ ! -x .venv/bench-mitm/bin/mitmdump ]; then
    python3 -m venv .venv/bench-mitm
    .venv/bench-mitm/bin/pip install --quiet mitmproxy
fi
if [ ! -x .venv/bench-mcpproxy/bin/mcp-proxy ]; then
    python3 -m venv .venv/bench-mcpproxy
    .venv/bench-mcpproxy/bin/pip install --quiet mcp-proxy uvloop httptools
fi
if [ ! -x .venv/bench-contextforge/bin/mcpgateway ]; then
    python3 -m venv .venv/bench-contextforge
    .venv/bench-contextforge/bin/pip install --quiet "mcp-contextforge-gateway==1.0.7.post20260921"
fi
if [ ! -x .venv/bench-node/node_modules/.bin/supergateway ]; then
    mkdir -p .venv/bench-node
    npm install --silent --no-audit --no-fund --prefix .venv/bench-node \
        mcp-proxy@6.7.19 supergateway@4.0.0
fi
